"""The torch device a run asks for, and a one-line fix when it cannot have it."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu; anything else as given."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(_no_cuda_line(str(device)))
    return device


def _no_cuda_line(device: str) -> str:
    """Why `device=cuda` cannot run here, and the fix (torch's own error names neither)."""
    version = torch.__version__.split("+")[0]
    if torch.version.cuda is None:
        return (
            f"device={device} but this torch ({torch.__version__}) is a CPU build; install a "
            f"CUDA build: .venv/bin/pip install --force-reinstall torch=={version} "
            "--index-url https://download.pytorch.org/whl/cu128 (docs/gpu.md)"
        )
    return (
        f"device={device} but torch (CUDA {torch.version.cuda}) sees no GPU; check nvidia-smi "
        "and CUDA_VISIBLE_DEVICES, or run with device=cpu"
    )
