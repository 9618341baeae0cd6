"""vLLM's own speculative sampling (acceptance=vllm, vllm_greedy) with the real vLLM CPU build:
no cactus_bench rule or drafter patch in the workers, vLLM's own rejection sampler verifying
(the bridge never called) and a short decode with vLLM's per-request step counts. A leftover
CACTUS_BENCH_VLLM_RULE in the environment (an earlier engine's) must not reach the workers.

The embedded pair (SmolLM2-135M-Instruct, its drafter's export), fp32, T 0.6 / top-p 0.95 /
top-k 20, m = 2, 3 seeded requests of 32 tokens per engine, eager. ~3 min on a quiet 2-core CPU
(two engine starts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM: make setup-vllm TARGET=cpu, then make test-vllm")
pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
M, SEEDS, MAX_TOKENS = 2, 3, 32


@pytest.fixture(scope="module")
def result():
    from cactus_bench.models.smollm2 import is_prepared, smollm2_dir
    from cactus_bench.vllm.acceptance import RULE_ENV, rule_spec
    from cactus_bench.vllm.export import export_vllm_drafter

    if not is_prepared():
        pytest.skip("needs the SmolLM2 cache (make setup)")
    job = {
        "verifier": str(smollm2_dir()),
        "drafter": str(export_vllm_drafter()),
        "m": M,
        "seeds": SEEDS,
        "max_tokens": MAX_TOKENS,
        "max_model_len": 256,
        "prompt": "Write a long story about a cat who travels the world and meets many friends.",
        "sampling": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
    }
    core = sorted(os.sched_getaffinity(0))[-1]
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": str(core),
        "PYTHONPATH": str(HERE.parent),
        RULE_ENV: rule_spec("cactus", {"delta": 1.0}),  # an earlier engine's, left behind
    }
    env.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    done = subprocess.run(
        [sys.executable, str(HERE / "own_sampler_worker.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.parametrize(
    ("acceptance", "method"), [("vllm", "probabilistic"), ("vllm_greedy", "greedy")]
)
def test_vllms_own_rejection_sampler_decodes_without_our_rule(result, acceptance, method):
    engine = result[acceptance]
    assert engine["draft_sample_method"] == method
    for report in [*engine["start"], *engine["after"]]:
        assert report["v1"] and report["rule"] is None and not report["draft_law"]
        assert report["expand_fix"] is True  # vllm-cpu's expand kernel checked (patches.py)
    (after,) = engine["after"]
    assert after["bridge_calls"] == 0 and after["draft_law_calls"] == 0  # vLLM's own ran
    records = engine["records"]
    assert all(r["sampler_name"] == "sps" for r in records)
    assert any(len(r["output_ids"]) > 1 for r in records)  # one may end at once (EOS)
    drafted = sum(sum(r["drafted_per_step"]) for r in records)
    accepted = sum(sum(r["accepted_per_step"]) for r in records)
    assert drafted > 0 and 0 < accepted < drafted  # vLLM verified the drafts, and rejected some
    for r in records:
        steps = zip(r["accepted_per_step"], r["drafted_per_step"], strict=True)
        assert all(0 <= a <= d <= M for a, d in steps)
        assert r["draft_probs_fallbacks"] == 0
