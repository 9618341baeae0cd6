"""Running a real-vLLM worker script of tests/ in its own process, on the embedded pair.

The tests that start vLLM's CPU engine run it in a subprocess (one engine build per process,
pinned to one core: `worker_core`), hand it a JSON job on stdin and read its `RESULT {json}` line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}  # the paper's sampling


def embedded_pair_job(**fields) -> dict:
    """The job's verifier (SmolLM2-135M-Instruct), drafter export and sampling, plus `fields`;
    skips the test when the SmolLM2 cache is missing."""
    from cactus_bench.models.smollm2 import is_prepared, smollm2_dir
    from cactus_bench.vllm.export import export_vllm_drafter

    if not is_prepared():
        pytest.skip("needs the SmolLM2 cache (make setup)")
    return {
        "verifier": str(smollm2_dir()),
        "drafter": str(export_vllm_drafter()),
        "sampling": SAMPLING,
        **fields,
    }


def worker_core() -> int:
    """The core a vLLM worker process is bound to: the last this process may use, and under
    pytest-xdist (make test-vllm) the last but N for worker gwN, so that engines started by two
    workers at once never share a core."""
    cores = sorted(os.sched_getaffinity(0))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    return cores[-1 - worker % len(cores)]


def run_worker(script: str, job: dict, **env_extra: str) -> tuple[dict, str]:
    """(the worker's RESULT, its stderr) from tests/<script> run on the job; a failure shows the
    end of its stderr."""
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": str(worker_core()),
        "PYTHONPATH": str(HERE.parent),
        **env_extra,
    }
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    done = subprocess.run(
        [sys.executable, str(HERE / script)],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT ")), done.stderr
