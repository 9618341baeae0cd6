"""What a benchmark row says about the machine it was measured on."""

from __future__ import annotations

import os

import torch

from cactus_bench.engine.cpu_kernels import cpu_info


def machine_facts() -> dict[str, object]:
    """The CPU (family and model: a generic name hides which one), its instruction set, torch's
    thread count and the 1-minute load average (timings on a shared machine are noisy)."""
    info = cpu_info()
    return {
        "cpu": info.model,
        "isa": info.isa,
        "threads": torch.get_num_threads(),
        "load_1m": round(os.getloadavg()[0], 2),
    }
