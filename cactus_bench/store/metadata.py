"""Provenance of a results row: config hash, git state, versions and the device timed on."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import platform
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

# Slurm jobs run long after submission, possibly from a changed tree: the launcher can pin the
# sha seen at submission in these variables and every job records that instead.
GIT_SHA_ENV = "CACTUS_BENCH_GIT_SHA"
GIT_DIRTY_ENV = "CACTUS_BENCH_GIT_DIRTY"

_REPO_ROOT = Path(__file__).resolve().parents[2]


def _canonical(value, path: str = "config"):
    """A JSON-ready copy where equal configs look equal: 1.0 == 1, tuples == lists."""
    if isinstance(value, Mapping):
        return {str(k): _canonical(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{path} = {value} cannot be hashed; use a finite number")
        return int(value) if value.is_integer() else value
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _canonical(value.item(), path)
    raise TypeError(
        f"{path} has type {type(value).__name__}; config_hash takes plain dicts "
        "(convert a DictConfig with OmegaConf.to_container(cfg, resolve=True))"
    )


def config_hash(config: Mapping) -> str:
    """Stable 16-hex-digit hash of the canonical JSON of the result-relevant config.

    Key order, int-vs-float spelling (1 vs 1.0) and tuple-vs-list do not change the hash; pass
    only what changes the result (not output paths, logger or launcher settings).
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config_hash takes a dict, got {type(config).__name__}")
    text = json.dumps(
        _canonical(config),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
        allow_nan=False,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=_REPO_ROOT, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """(sha, dirty) of the harness checkout; the env pins win; (None, None) outside git.

    Dirty means the code or configs differ from the commit. The committed outputs under
    results/ do not count: a sweep appends to its tracked CSV, and its second row would
    otherwise call the checkout dirty."""
    if os.environ.get(GIT_SHA_ENV):
        dirty = os.environ.get(GIT_DIRTY_ENV, "").strip().lower()
        return os.environ[GIT_SHA_ENV], {"true": True, "false": False}.get(dirty)
    sha = _git("rev-parse", "HEAD")
    if sha is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    return sha, (None if status is None else bool(status))


def _package_version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: str) -> str:
    """Human name of the device timings come from, e.g. 'NVIDIA A100-SXM4-40GB' or the CPU."""
    device = str(device)
    if device.startswith("cuda"):
        import torch  # lazy: reading a CSV must never need torch

        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        return torch.cuda.get_device_name(index)
    if device == "cpu":
        import torch  # lazy: as above (a runner has it loaded; its threads shape every timing)

        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        cores = cores or os.cpu_count()
        threads = torch.get_num_threads()
        noun = "thread" if threads == 1 else "threads"
        return f"CPU: {cpu_name()} ({cores} cores, {threads} torch {noun})"
    return device


def run_metadata(device: str) -> dict:
    """timestamp, git_sha, git_dirty, versions and device_name columns for a results row."""
    sha, dirty = git_state()
    return {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_sha": sha,
        "git_dirty": dirty,
        "torch_version": _package_version("torch"),
        "transformers_version": _package_version("transformers"),
        "python_version": platform.python_version(),
        "device_name": device_name(device),
    }
