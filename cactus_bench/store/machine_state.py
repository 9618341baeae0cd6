"""The machine's state around a run's arms: load, GPU clocks and other processes' GPU use.

A speedup compares two arms' throughput, so a change of machine state between them (another
job starting on a shared node) is a change of the answer. Each row records the 1-minute load
average when each arm began and ended (`os.getloadavg`); on CUDA also the SM clock and the GPU
memory other processes hold, where pynvml or nvidia-smi can see them (never required). A cached
baseline carries the same state from when it was decoded (run/baseline.py), so a row that
reuses it records the gap in time and load, and a baseline too old or from another machine is
refused (`cached_refusal`).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import subprocess
import time

from cactus_bench.store.metadata import cpu_name, device_name

ARM_MOMENTS = ("start", "end")


def load_now() -> dict:
    """{"time": unix seconds, "load": 1-minute load average} now (cheap: one syscall)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # not every platform has a load average
        load = None
    return {"time": time.time(), "load": load}


def machine_identity(device: str) -> dict:
    """What a cached baseline's timings are tied to: the host, its CPU and the timed device."""
    return {"host": platform.node(), "cpu": cpu_name(), "device": device_name(device)}


def gpu_state(device: str) -> dict | None:
    """SM clock (MHz) and the GPU memory (MiB) held by processes other than this one, where
    visible; None off CUDA or when neither pynvml nor nvidia-smi answers."""
    if not str(device).startswith("cuda"):
        return None
    state = _pynvml_state(device)
    return state if state is not None else _nvidia_smi_state()


def _device_index(device: str) -> int:
    return int(str(device).split(":", 1)[1]) if ":" in str(device) else 0


def _pynvml_state(device: str) -> dict | None:
    try:
        import pynvml  # lazy: optional, not a dependency
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(_device_index(device))
        clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        others = [
            p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid != os.getpid()
        ]
        used = sum((p.usedGpuMemory or 0) for p in others) / 2**20
        return {"sm_clock_mhz": clock, "other_processes": len(others), "other_mib": used}
    except Exception as error:  # a driver that refuses a query: say so, never fail the run
        return {"error": type(error).__name__}


def _nvidia_smi_state() -> dict | None:
    if shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--format=csv,noheader,nounits"]
    try:
        clock = subprocess.run(
            [*query, "--query-gpu=clocks.sm"], capture_output=True, text=True, timeout=10
        ).stdout.split()
        apps = subprocess.run(
            [*query, "--query-compute-apps=pid,used_memory"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as error:
        return {"error": type(error).__name__}
    others = [line.split(",") for line in apps if line.strip()]
    others = [(pid.strip(), mib.strip()) for pid, mib in others if pid.strip() != str(os.getpid())]
    return {
        "sm_clock_mhz": int(clock[0]) if clock and clock[0].isdigit() else None,
        "other_processes": len(others),
        "other_mib": sum(float(mib) for _, mib in others if mib.replace(".", "").isdigit()),
    }


def load_columns(spec: dict, baseline: dict) -> dict:
    """load_{spec,baseline}_{start,end} from each arm's {"start": load_now(), "end": ...}."""
    return {
        f"load_{arm}_{moment}": (state.get(moment) or {}).get("load")
        for arm, state in (("spec", spec), ("baseline", baseline))
        for moment in ARM_MOMENTS
    }


def cached_gap(spec: dict, cached_state: dict) -> dict:
    """baseline_age_s (the spec arm's start after the cached decode's end) and
    baseline_load_gap (the spec arm's start load minus the cached decode's start load)."""
    start, decoded = spec.get("start") or {}, cached_state.get("end") or {}
    load, cached_load = start.get("load"), (cached_state.get("start") or {}).get("load")
    age = start.get("time", time.time()) - decoded["time"] if decoded.get("time") else None
    return {
        "baseline_age_s": age,
        "baseline_load_gap": None if load is None or cached_load is None else load - cached_load,
    }


def cached_refusal(meta: dict, identity: dict, max_age_h: float, refresh: str, now=None) -> str:
    """Why a cached baseline may not serve this run ("" when it may): decoded longer than
    `max_age_h` hours ago, on another machine, or before baselines recorded their machine.
    `refresh` says how to decode a fresh one (the files to delete)."""
    state = meta.get("machine_state")
    if not state or not (state.get("end") or {}).get("time"):
        return f"baseline: the cached baseline records no machine state (older harness); {refresh}"
    differs = [k for k in ("cpu", "device") if state.get("machine", {}).get(k) != identity[k]]
    if differs:
        theirs = ", ".join(f"{k} {state['machine'].get(k)!r}" for k in differs)
        return f"baseline: the cached baseline was decoded on another machine ({theirs}); {refresh}"
    age_h = ((now or time.time()) - state["end"]["time"]) / 3600
    if age_h > max_age_h:
        when = dt.datetime.fromtimestamp(state["end"]["time"], dt.UTC).isoformat(timespec="minutes")
        return (
            f"baseline: the cached baseline is {age_h:.1f} h old (decoded {when}; "
            f"baseline_max_age_h={max_age_h:g}); {refresh}, or raise baseline_max_age_h"
        )
    return ""
