"""Helpers of `make setup-gpu` and `make setup-vllm TARGET=gpu` (standard library only).

    python3 scripts/setup_gpu.py driver [--index URL]  # before installing: driver, Python
    .venv/bin/python scripts/setup_gpu.py verify        # after: CUDA torch sees the GPU, a matmul

PyPI's torch 2.13.0 for Linux x86_64 is the CUDA 13.0 build (its wheel requires
cuda-toolkit==13.0.3), and vLLM 0.33.0 pins torch 2.14.0, a CUDA 13 build too: both need an
NVIDIA driver >= 580.65.06 (CUDA 13.0's minimum on Linux). `driver` checks that before anything
downloads (about 3 GB), and otherwise says in one line which driver the PyPI build needs and how
to choose another build (TORCH_INDEX: one of PyTorch's own indexes, e.g. cu126 for drivers
>= 525). Exit status 0 when fine, 2 with the one line on stderr.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

PYPI_CUDA = "13.0"  # the CUDA of PyPI's torch 2.13.0 / 2.14.0 Linux wheels
PYPI_MIN_DRIVER = (580, 65, 6)  # CUDA 13.0's minimum Linux driver
OTHER_BUILDS = (
    "pick the build for your driver at https://pytorch.org/get-started/locally and pass its "
    "index, e.g. make setup-gpu TORCH_INDEX=https://download.pytorch.org/whl/cu126 "
    "(CUDA 12.6, drivers >= 525)"
)
MIN_PYTHON = (3, 11)


def parse_version(text: str) -> tuple[int, ...]:
    """'580.65.06' -> (580, 65, 6)."""
    return tuple(int(part) for part in text.strip().split("."))


def read_driver() -> str | None:
    """The driver version nvidia-smi reports for GPU 0, or None without a working nvidia-smi."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


def driver_problem(driver: str | None, index: str | None, python=sys.version_info) -> str | None:
    """None when this node can take the chosen torch build, else one line naming the fix."""
    if tuple(python[:2]) < MIN_PYTHON:
        return (
            f"Python {python[0]}.{python[1]} is too old: cactus-bench and vLLM 0.33 need Python "
            ">= 3.11 (make setup-gpu uses python3; point it at a newer one)"
        )
    if driver is None:
        return (
            "no NVIDIA driver here (nvidia-smi is missing or fails): run make setup-gpu on the GPU "
            "node itself, or make setup for a CPU-only .venv"
        )
    if index:  # the user chose a build for their driver: nothing to check against PyPI's
        return None
    if parse_version(driver) < PYPI_MIN_DRIVER:
        need = ".".join(f"{part:02d}" if i else str(part) for i, part in enumerate(PYPI_MIN_DRIVER))
        return (
            f"NVIDIA driver {driver} is older than {need}, which PyPI's torch (CUDA {PYPI_CUDA} "
            f"build) needs; update the driver, or {OTHER_BUILDS}"
        )
    return None


def verify() -> str | None:
    """After the install: None when torch is a CUDA build that computes on the GPU."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build; rerun make setup-gpu on the GPU node"
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: check "
            f"nvidia-smi and CUDA_VISIBLE_DEVICES; {OTHER_BUILDS}"
        )
    x = torch.randn(256, 256, device="cuda")
    if not torch.allclose((x @ x).cpu(), x.cpu() @ x.cpu(), rtol=1e-3, atol=1e-2):
        return "a matmul on the GPU disagrees with the CPU: the CUDA install is broken"
    name = torch.cuda.get_device_name(0)
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) on {name}: ok")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("driver", "verify"))
    parser.add_argument("--index", default="", help="TORCH_INDEX, when the user chose one")
    args = parser.parse_args()
    if args.command == "driver":
        driver = read_driver()
        problem = driver_problem(driver, args.index or None)
        if problem is None:
            print(f"NVIDIA driver {driver}: ok for " + (args.index or f"PyPI's CUDA {PYPI_CUDA}"))
    else:
        problem = verify()
    if problem:
        print(f"setup-gpu: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
