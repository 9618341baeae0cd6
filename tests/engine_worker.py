"""tests/test_vllm_engine.py's worker: one vLLM process (vLLM starts its engine with spawn, so
the engine runs here, not inside pytest). Reads a JSON job on stdin, prints RESULT <json>."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    job = json.loads(sys.stdin.read())
    from transformers import AutoTokenizer

    from cactus_bench.engine import SamplingParams
    from cactus_bench.vllm.decoder import VllmDecoder
    from cactus_bench.vllm.engines import VllmOptions, build_llm
    from cactus_bench.vllm.runner import REPORT_METHOD

    options = VllmOptions(
        enforce_eager=True, max_model_len=job["max_model_len"], batch=job["batch"]
    )
    common = {"dtype": "float32", "seed": 0, "options": options}
    spec_llm = build_llm(
        job["verifier"],
        rule=("cactus", {"delta": 1.0}),
        drafter_id=job["drafter"],
        m=job["m"],
        **common,
    )
    reports = spec_llm.collective_rpc(REPORT_METHOD)
    tokenizer = AutoTokenizer.from_pretrained(job["verifier"])
    sampling = SamplingParams(**job["sampling"])
    spec = VllmDecoder(
        spec_llm, tokenizer, num_draft_tokens=job["m"], sampler_name="cactus", sampling=sampling
    )
    prompt = tokenizer.encode(job["prompt"])

    def run(decoder, seed: int) -> dict:
        record = decoder.generate(prompt, job["max_model_len"], seed=seed)
        return {**record.to_dict(), "prompt_len": len(prompt)}

    records = [run(spec, seed) for seed in range(job["seeds"])]
    # more requests than slots, all submitted at once: vLLM's continuous batching
    requests = [
        {"prompt_ids": prompt, "max_new_tokens": job["batch_tokens"], "seed": 100 + index}
        for index in range(job["batch_requests"])
    ]
    ended: list[int] = []
    start = time.perf_counter()
    batched = spec.generate_batch(requests, job["batch"], on_finish=lambda i, r: ended.append(i))
    batched_wall = time.perf_counter() - start
    # a second engine in this process, built after the first: the first's counts are unaffected
    build_llm(job["verifier"], drafter_id=None, m=0, **common)
    after = run(spec, job["seeds"])
    batched = [record.to_dict() for record in batched]
    # the drafter folder as vLLM's model registry loads it (its own architecture): the law of
    # its first token, as vLLM's raw log-probabilities (before temperature / top-k / top-p)
    from vllm import SamplingParams as VllmSamplingParams

    drafter_llm = build_llm(job["drafter"], drafter_id=None, m=0, **common)
    law = VllmSamplingParams(max_tokens=1, temperature=1.0, logprobs=20, seed=0)
    (first,) = drafter_llm.generate([{"prompt_token_ids": prompt}], law, use_tqdm=False)
    drafter_logprobs = {
        token: logprob.logprob for token, logprob in first.outputs[0].logprobs[0].items()
    }
    print(
        "RESULT "
        + json.dumps(
            {
                "reports": reports,
                "records": records,
                "after": after,
                "batched": {
                    "records": batched,
                    "wall": batched_wall,
                    "reads": spec.last_batch_reads_s,
                    "ended": ended,
                },
                "prompt": prompt,
                "drafter_logprobs": drafter_logprobs,
            }
        )
    )


if __name__ == "__main__":
    main()
