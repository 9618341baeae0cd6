"""Shared fixtures: the tiny in-memory model pair (built once per session), a one-thread mode,
and running a module's decoder tests on both forward paths; the fixed hypothesis profile."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# Property tests draw the same examples on every run (CI must not pass or fail by luck);
# HYPOTHESIS_PROFILE=explore draws fresh ones, e.g. to hunt for new counterexamples.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


@pytest.fixture(autouse=True)
def hub_mode_restored():
    """Loading a cached hub pair while the hub is unreachable switches the whole process offline
    (`models.hub.go_offline_if_unreachable`: huggingface_hub's constant and $HF_HUB_OFFLINE), as
    it should in a run; in a test session that would leak into every later test, so each test
    starts and ends in the mode the session began with."""
    from huggingface_hub import constants

    flag, variable = constants.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE")
    yield
    constants.HF_HUB_OFFLINE = flag
    if variable is None:
        os.environ.pop("HF_HUB_OFFLINE", None)
    else:
        os.environ["HF_HUB_OFFLINE"] = variable


@pytest.fixture(scope="session")
def tiny_pair():
    """(drafter, verifier, tokenizer) from `make_tiny_pair(seed=0)`; eval mode, do not mutate."""
    from cactus_bench.models.tiny import make_tiny_pair

    return make_tiny_pair(seed=0)


@pytest.fixture(scope="module")
def single_thread():
    """Tiny models are dominated by per-op overhead: on a shared 2-core machine one torch
    thread is ~10x faster than two fighting for cores. Opt in with
    `pytestmark = pytest.mark.usefixtures("single_thread")`."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(params=["off", "auto", "onednn"], ids=["hf_forward", "fast_forward", "fast_onednn"])
def forward_path(request, monkeypatch):
    """Runs a module's tests on HF's eager forward, on the fast static-cache forward (the
    default, "auto": eager, its linear kernel chosen by `cpu_kernels`; on the tiny fp32 models
    that is ATen up to 8 rows) and on the fast forward with every linear layer on oneDNN's packed
    weights ("onednn", x86 CPUs only; compiled runs are in tests/test_fast_forward.py), by
    binding `fast=` into the decoder classes the module imported. Opt in with
    `pytestmark = pytest.mark.usefixtures("forward_path")`."""
    fast = request.param
    if request.param == "onednn":
        from cactus_bench.engine import runtime
        from cactus_bench.engine.cpu_kernels import resolve_linear_kernel

        if resolve_linear_kernel("auto", torch.device("cpu"), torch.float32) != "onednn":
            pytest.skip("oneDNN packs need an x86 CPU and torch's oneDNN")
        monkeypatch.setattr(runtime, "DEFAULT_LINEAR_KERNEL", "onednn")
        fast = "auto"
    for name in ("SpeculativeDecoder", "AutoregressiveDecoder"):
        cls = getattr(request.module, name, None)
        if cls is not None:
            monkeypatch.setattr(request.module, name, functools.partial(cls, fast=fast))
    return fast


# ---- the real single-node Slurm (scripts/slurm/up.sh) -----------------------------------------
SLURM_DIR = Path(os.environ.get("CACTUS_SLURM_DIR", "/tmp/cactus-bench-slurm"))
SLURM_BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def slurm_env():
    """The environment of a running test cluster (SLURM_CONF set); started here if needed and
    then stopped again. Skips, with the reason, when Slurm is not installed or cannot start
    (`make slurm-install slurm-up`; .ci/run does both, and sets CACTUS_BENCH_REQUIRE_SLURM=1 so
    that a cluster that cannot start fails these tests instead)."""
    unavailable = pytest.fail if os.environ.get("CACTUS_BENCH_REQUIRE_SLURM") else pytest.skip
    missing = [name for name in SLURM_BINARIES if shutil.which(name) is None]
    if missing:
        unavailable(
            f"Slurm is not installed ({', '.join(missing)} missing): "
            "make slurm-install (apt-get install slurm-wlm munge) to run the real-Slurm tests"
        )
    env = {**os.environ, "SLURM_CONF": str(SLURM_DIR / "slurm.conf")}
    running = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True)
    started_here = running.returncode != 0
    if started_here:
        up = subprocess.run(
            [REPO / "scripts/slurm/up.sh"], capture_output=True, text=True, timeout=300
        )
        if up.returncode != 0:
            reason = (up.stderr.strip().splitlines() or ["no output"])[0]
            unavailable(f"the test Slurm cluster could not start: {reason}")
    yield env
    if started_here:
        subprocess.run([REPO / "scripts/slurm/down.sh"], capture_output=True, timeout=120)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Under pytest-xdist (`make test`), every real-Slurm test runs on one worker: they share one
    cluster of one node, whose few CPUs would otherwise make one test's jobs wait on another's
    past the time limits some of them set, and one session-scoped `slurm_env` may start and
    stop it. tryfirst: xdist's worker reads the xdist_group marks in this same hook, and a
    conftest's implementation would otherwise run after it (the marks then group nothing)."""
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            item.add_marker(pytest.mark.xdist_group("slurm"))


def pytest_terminal_summary(terminalreporter):
    """One line saying how many real-Slurm tests ran, so a green run cannot hide that they
    were all skipped (CI brings the cluster up for them)."""
    counts = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        reports = terminalreporter.stats.get(outcome, [])
        slurm = [r for r in reports if "slurm" in getattr(r, "keywords", {})]
        if outcome == "skipped":  # a skip is reported at setup; count each test once
            slurm = [r for r in slurm if r.when in ("setup", "call")]
        counts[outcome] = len({r.nodeid for r in slurm})
    if any(counts.values()):
        ran = counts["passed"] + counts["failed"] + counts["error"]
        terminalreporter.write_line(
            f"real Slurm: {ran} tests ran ({counts['passed']} passed, {counts['failed']} failed, "
            f"{counts['error']} errors), {counts['skipped']} skipped"
        )
