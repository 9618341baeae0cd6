"""One vLLM engine with one acceptance rule, run as a subprocess of tests/test_vllm_agreement.py.

Reads a JSON job on stdin, prints one line `RESULT <json>`: the pooled spec-decode counter deltas
of decoding every (prompt, seed) request in one batch, and optionally the first two tokens of
many seeded requests of one prompt (the first-token law test). A subprocess per rule because
vLLM reads the rule once per engine process and one process holds one engine's counters.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    job = json.loads(sys.stdin.read())
    from vllm import SamplingParams

    from cactus_bench.vllm.decoder import counter_delta, spec_counters
    from cactus_bench.vllm.engines import VllmOptions, build_llm

    llm = build_llm(
        job["verifier"],
        rule=(job["rule"], job["params"]),
        drafter_id=job["drafter"],
        m=job["m"],
        dtype="float32",
        seed=0,
        options=VllmOptions(enforce_eager=True),
    )
    sampling = job["sampling"]  # temperature, top_p, top_k

    def params(seed: int, max_tokens: int) -> SamplingParams:
        return SamplingParams(**sampling, max_tokens=max_tokens, seed=seed)

    prompts = [{"prompt_token_ids": ids} for ids in job["prompts"]]
    before = spec_counters(llm.get_metrics())
    outputs = llm.generate(
        prompts, [params(seed, job["max_tokens"]) for seed in job["seeds"]], use_tqdm=False
    )
    result = {
        "counters": counter_delta(before, spec_counters(llm.get_metrics())),
        "tokens": sum(len(out.outputs[0].token_ids) for out in outputs),
    }
    if job.get("law_prompt"):
        seeds = range(job["law_samples"])
        outputs = llm.generate(
            [{"prompt_token_ids": job["law_prompt"]}] * len(seeds),
            [params(10_000 + seed, 2) for seed in seeds],
            use_tqdm=False,
        )
        result["pairs"] = [list(out.outputs[0].token_ids[:2]) for out in outputs]
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
