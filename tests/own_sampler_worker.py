"""tests/test_vllm_own_sampler.py's worker: vLLM's own speculative sampling (acceptance=vllm and
vllm_greedy) in one vLLM process (vLLM starts its engine with spawn, so it runs here, not inside
pytest). Reads a JSON job on stdin, prints RESULT <json>."""

from __future__ import annotations

import json
import sys


def main() -> None:
    job = json.loads(sys.stdin.read())
    from transformers import AutoTokenizer

    from cactus_bench.engine import SamplingParams
    from cactus_bench.vllm.decoder import VllmDecoder
    from cactus_bench.vllm.engines import VllmOptions, build_llm
    from cactus_bench.vllm.runner import REPORT_METHOD

    tokenizer = AutoTokenizer.from_pretrained(job["verifier"])
    prompt = tokenizer.encode(job["prompt"])
    sampling = SamplingParams(**job["sampling"])
    options = VllmOptions(enforce_eager=True, max_model_len=job["max_model_len"])
    out = {}
    for acceptance in ("vllm", "vllm_greedy"):
        llm = build_llm(
            job["verifier"],
            acceptance=acceptance,
            drafter_id=job["drafter"],
            m=job["m"],
            dtype="float32",
            seed=0,
            options=options,
        )
        start = llm.collective_rpc(REPORT_METHOD)
        decoder = VllmDecoder(
            llm, tokenizer, num_draft_tokens=job["m"], sampler_name="sps", sampling=sampling
        )
        records = [
            decoder.generate(prompt, job["max_tokens"], seed=seed).to_dict()
            for seed in range(job["seeds"])
        ]
        speculative = llm.llm_engine.vllm_config.speculative_config
        out[acceptance] = {
            "start": start,
            "after": llm.collective_rpc(REPORT_METHOD),  # the calls made while decoding
            "records": records,
            "draft_sample_method": speculative.draft_sample_method,
        }
        del llm
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
