"""tests/test_vllm_engine.py's worker: one vLLM process (vLLM starts its engine with spawn, so
the engine runs here, not inside pytest). Reads a JSON job on stdin, prints RESULT <json>."""

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

    options = VllmOptions(enforce_eager=True, max_model_len=job["max_model_len"])
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
    # a second engine in this process, built after the first: the first's counts are unaffected
    build_llm(job["verifier"], drafter_id=None, m=0, **common)
    after = run(spec, job["seeds"])
    print("RESULT " + json.dumps({"reports": reports, "records": records, "after": after}))


if __name__ == "__main__":
    main()
