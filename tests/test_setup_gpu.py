"""make setup-gpu's driver check (scripts/setup_gpu.py): one line naming the fix, before any
download; a fake nvidia-smi stands in for the driver."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import setup_gpu  # noqa: E402


def test_driver_rules():
    assert setup_gpu.parse_version("580.65.06") == (580, 65, 6)
    assert setup_gpu.driver_problem("580.65.06", None) is None
    assert setup_gpu.driver_problem("590.1", None) is None
    old = setup_gpu.driver_problem("550.54.15", None)
    assert "550.54.15 is older than 580.65.06" in old and "TORCH_INDEX=" in old
    assert setup_gpu.driver_problem("550.54.15", "https://download.pytorch.org/whl/cu126") is None
    assert "nvidia-smi" in setup_gpu.driver_problem(None, None)
    assert ">= 3.11" in setup_gpu.driver_problem("580.65.06", None, python=(3, 10, 0))


@pytest.mark.parametrize(
    ("driver", "code", "says"),
    [("535.104.05", 2, "older than 580.65.06"), ("580.95.05", 0, "ok for PyPI's CUDA 13.0")],
)
def test_driver_command_with_a_fake_nvidia_smi(tmp_path, driver, code, says):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\necho {driver}\n")
    fake.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "scripts/setup_gpu.py", "driver"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == code
    out = done.stderr if code else done.stdout
    assert says in out and len(out.strip().splitlines()) == 1
