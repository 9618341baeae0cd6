"""Shared fixtures: the tiny in-memory model pair (built once per session), a one-thread mode,
and running a module's decoder tests on both forward paths; the fixed hypothesis profile."""

from __future__ import annotations

import functools
import os

import pytest
import torch
from hypothesis import settings

# Property tests draw the same examples on every run (CI must not pass or fail by luck);
# HYPOTHESIS_PROFILE=explore draws fresh ones, e.g. to hunt for new counterexamples.
settings.register_profile("fixed", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))


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
