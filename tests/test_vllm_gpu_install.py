"""`make setup-vllm TARGET=gpu` resolves on PyPI: what a CUDA node would install, worked out here.

The GPU build cannot be installed on this CPU machine (the Makefile's VLLM_GPU_VERSION, 0.33.0
while 0.34.0's flashinfer pin is missing from PyPI, pulls a CUDA torch of several GB), but its
two pip steps can be resolved
without installing anything (`pip install --dry-run --ignore-installed --report`, metadata only):
1. `vllm==VLLM_GPU_VERSION` alone: the torch and transformers vLLM brings, and that this torch
   is the CUDA build (it depends on NVIDIA's runtime wheels);
2. vLLM together with the project's other requirements as `scripts/vllm_env.py` lists them
   (torch and transformers pinned at step 1's versions): the set resolves, and neither pin moves.
A conflict between the project's pins and vLLM's (a new dependency, a raised lower bound) fails
here, before a user's GPU node finds it. Runs in the vLLM suite; needs PyPI (skips without it).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
GPU_VERSION = re.search(  # the Makefile's VLLM_GPU_VERSION: what TARGET=gpu installs
    r"^VLLM_GPU_VERSION \?= (\S+)", (REPO / "Makefile").read_text(), re.M
).group(1)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="a vLLM set-up check: make setup-vllm TARGET=cpu, then make test-vllm",
    ),
]


def resolve(requirements: list[str], report: Path) -> dict[str, str]:
    """{package: version} pip would install for `requirements` on an empty environment."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        + ["--report", str(report), *requirements],
        capture_output=True,
        text=True,
        timeout=900,
    )
    missing = re.search(r"No matching distribution found for (\S+)", done.stderr)
    if done.returncode != 0 and missing and "from versions:" in done.stderr:
        # the index answered, without the pinned release: a GPU node's install fails the same way
        pytest.fail(f"{requirements[0]} needs {missing.group(1)}, which the index does not have")
    if done.returncode != 0 and "ResolutionImpossible" not in done.stderr:
        pytest.skip(f"pip cannot reach the package index here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, f"pip cannot resolve {requirements}: {done.stderr[-1500:]}"
    installs = json.loads(report.read_text())["install"]
    return {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in installs}


def test_the_gpu_build_and_the_project_resolve_together(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    import vllm_env

    alone = resolve([f"vllm=={GPU_VERSION}"], tmp_path / "vllm.json")
    assert alone["vllm"] == GPU_VERSION
    assert "+cpu" not in alone["torch"]
    assert any(name.startswith("nvidia-") for name in alone), "vLLM's torch is not a CUDA build"

    project = vllm_env.requirements(alone["torch"], alone["transformers"])
    together = resolve([f"vllm=={GPU_VERSION}", *project], tmp_path / "together.json")
    for name in ("vllm", "torch", "transformers"):
        assert together[name] == alone[name], f"the project's pins move {name}"
    planned = {canonicalize_name(name) for name in together}
    for requirement in map(Requirement, project):  # every project dependency is in the plan
        assert canonicalize_name(requirement.name) in planned, requirement
