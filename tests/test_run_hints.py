"""Hints that name the fix: a dotted top-level key, the sampler's one budget under `--cfg job`, a
budget given to a rule without one, and `device=cuda` on a CPU build of torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.runs import tiny_conf

from cactus_bench.models.loading import resolve_device
from cactus_bench.run import ignored_settings, validate

REPO = Path(__file__).resolve().parents[1]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_dotted_top_level_key_suggests_its_underscore_name():
    done = _cli("data.dir=/x")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: unknown config key 'data.dir' (did you mean 'data_dir'?)"
    ]


def test_cfg_job_shows_the_budget_the_rule_will_use():
    """The shortcut sets the preset's own key while Hydra composes: one value, printed once."""
    done = _cli("sampler=cactus_0.25", "delta=0.75", "--cfg", "job")
    assert done.returncode == 0, done.stderr
    sampler = done.stdout.split("sampler:\n")[1].split("\nbackend:")[0]
    lines = sampler.splitlines()
    assert lines[:2] == ["  name: cactus", "  delta: 0.75"]
    # then the guards at their defaults (docs/rules.md, Guards), nothing else
    assert [line.split(":")[0].strip() for line in lines[2:]] == [
        "stop",
        "strict_first",
        "relax_in",
        "near_top",
    ]
    assert "0.25" not in done.stdout


def _ignored(tmp_path, *overrides: str) -> list[str]:
    conf = tiny_conf(tmp_path, *overrides)
    return ignored_settings(conf, validate(conf))


def test_a_budget_given_to_a_rule_without_one_warns_once(tmp_path):
    (line,) = _ignored(tmp_path, "sampler=sps", "delta=0.5")
    assert line.startswith("warning: sampler 'sps' has no divergence budget")
    assert "delta=0.5 is ignored" in line and "cactus" in line
    assert _ignored(tmp_path, "sampler=cactus", "delta=0.5") == []
    assert _ignored(tmp_path, "sampler=sps") == []


def test_cuda_on_a_cpu_build_of_torch_says_how_to_install_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(ValueError, match="is a CPU build; install a CUDA build") as error:
        resolve_device("cuda")
    assert "--index-url https://download.pytorch.org/whl/" in str(error.value)
    assert "\n" not in str(error.value)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with pytest.raises(ValueError, match="sees no GPU; check nvidia-smi"):
        resolve_device("cuda:1")
    assert resolve_device("auto") == torch.device("cpu")
