"""gpu_check's vLLM check: vLLM on the embedded verifier against this project's engine."""

from __future__ import annotations

import os
from pathlib import Path

from gpu_checks import compare_greedy

from cactus_bench.bench.sampling import GREEDY, PAPER_SAMPLING
from cactus_bench.engine import AutoregressiveDecoder


def vllm_agreement(model_dir: Path, pair, prompts, new_tokens: int, device) -> dict:
    """vLLM on the embedded verifier: greedy tokens against this project's engine (up to ties,
    bf16 both), and a self-drafting run (drafter = verifier) with the Cactus rule installed
    through the plugin, whose drafts should nearly all be accepted."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return {
            "skipped": "vLLM is not importable (pip install 'cactus-bench[vllm]' on a CUDA "
            "machine)",
            "passed": True,
        }
    from cactus_bench.vllm.decoder import VllmDecoder, VllmOptions, build_llm

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    options = VllmOptions(gpu_memory_utilization=0.25, max_model_len=2048, enforce_eager=True)
    verifier_llm = build_llm(
        str(model_dir), drafter_id=None, m=0, dtype="bfloat16", seed=0, options=options
    )
    # Both stop at the model's EOS (vLLM does unless told to ignore it).
    ours = AutoregressiveDecoder(
        pair.verifier, pair.tokenizer, sampling=GREEDY, device=device, compile="off"
    )
    theirs = VllmDecoder(
        verifier_llm, pair.tokenizer, num_draft_tokens=0, sampler_name=None, sampling=GREEDY
    )
    greedy = compare_greedy(ours, theirs, pair.verifier, prompts, new_tokens, "bfloat16", device)
    del verifier_llm, theirs
    spec_llm = build_llm(
        str(model_dir),
        rule=("cactus", {"delta": 1.0}),
        drafter_id=str(model_dir),
        m=4,
        dtype="bfloat16",
        seed=0,
        options=options,
    )
    spec = VllmDecoder(
        spec_llm, pair.tokenizer, num_draft_tokens=4, sampler_name="cactus", sampling=PAPER_SAMPLING
    )
    records = [spec.generate(p, new_tokens, seed=i) for i, p in enumerate(prompts)]
    drafted = sum(sum(r.drafted_per_step) for r in records)
    accepted = sum(sum(r.accepted_per_step) for r in records)
    rate = accepted / max(drafted, 1)
    return {
        "vllm_version": vllm.__version__,
        "greedy_vs_engine": greedy,
        "self_draft_accept_rate": round(rate, 4),
        "passed": greedy["passed"] and rate >= 0.9,
    }
