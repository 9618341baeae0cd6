"""tests/test_vllm_engine.py's worker: one vLLM process (vLLM starts its engine with spawn, so
the engine runs here, not inside pytest). Reads a JSON job on stdin, prints RESULT <json>.

The verifier is loaded from a copy of its folder whose generation_config.json asks for another
sampling (GENERATION_CONFIG), which the engine must ignore. Functions sent to the engine's
worker (`collective_rpc` with a callable) record what the rule's bridge sees, swap the rule,
and remove the patch, so one engine serves all of it.
"""

from __future__ import annotations

import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

GENERATION_CONFIG = {"temperature": 1.7, "top_k": 3, "top_p": 0.5, "do_sample": True}


def with_generation_config(folder: str) -> str:
    """A folder of links to `folder`'s files, with GENERATION_CONFIG as generation_config.json."""
    copy = Path(tempfile.mkdtemp(prefix="cactus-genconfig-"))
    for path in Path(folder).iterdir():
        if path.name != "generation_config.json":
            (copy / path.name).symlink_to(path.resolve())
    original = json.loads((Path(folder) / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**original, **GENERATION_CONFIG}))
    return str(copy)


def _v1_sampler():
    from cactus_bench.vllm import acceptance

    return importlib.import_module(acceptance.PATCH_TARGETS[0])


def record_laws(worker) -> None:
    """In the worker: wrap the bridge so each call records the temperatures and the largest
    support (finite logits in a row) of the verifier's law it is handed."""
    import torch

    module = _v1_sampler()
    bridge = module.rejection_sample
    seen: list = []

    def recording(*args, **kwargs):
        target, metadata = args[5], args[7]  # vLLM 0.32 calls it positionally
        temperature = metadata.temperature
        seen.append(
            {
                "temperature": None if temperature is None else temperature.tolist(),
                "support": int(torch.isfinite(target).sum(-1).max()) if target.numel() else 0,
            }
        )
        return bridge(*args, **kwargs)

    recording.cactus_original, recording.cactus_rule = bridge.cactus_original, bridge.cactus_rule
    recording.cactus_seen, recording.cactus_bridge = seen, bridge
    module.rejection_sample = recording


def laws_seen(worker) -> list:
    """In the worker: what `record_laws` saw, its wrapper removed."""
    module = _v1_sampler()
    recording = module.rejection_sample
    module.rejection_sample = recording.cactus_bridge
    return recording.cactus_seen


def install(worker, spec: str) -> str:
    """In the worker: the rule of a RULE_ENV value in place of the installed one."""
    from cactus_bench.vllm import acceptance

    rule = acceptance.parse_rule_spec(spec)
    acceptance.install_rule(_v1_sampler(), rule)
    return rule.name


def remove_patch(worker) -> None:
    """In the worker: vLLM's own rejection_sample back, as a patch that never took effect."""
    module = _v1_sampler()
    module.rejection_sample = module.rejection_sample.cactus_original


def main() -> None:
    job = json.loads(sys.stdin.read())
    from transformers import AutoTokenizer

    from cactus_bench.engine import SamplingParams
    from cactus_bench.samplers.catalogue import parse_sampler
    from cactus_bench.vllm.decoder import VllmDecoder
    from cactus_bench.vllm.engines import VllmOptions, build_llm
    from cactus_bench.vllm.runner import REPORT_METHOD

    options = VllmOptions(
        enforce_eager=True, max_model_len=job["max_model_len"], batch=job["batch"]
    )
    common = {"dtype": "float32", "seed": 0, "options": options}
    verifier = with_generation_config(job["verifier"])
    spec_llm = build_llm(
        verifier,
        rule=parse_sampler({"name": "cactus", "delta": 1.0}),
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

    defaults = spec_llm.get_default_sampling_params()
    spec_llm.collective_rpc(record_laws)
    records = [run(spec, seed) for seed in range(job["seeds"])]
    (seen,) = spec_llm.collective_rpc(laws_seen)
    checks_start = time.perf_counter()  # the SpS and removed-patch runs: their seconds reported
    # the same engine with SpS's rule in its worker, then with no patch at all: refused
    spec_llm.collective_rpc(install, args=('{"name": "sps"}',))
    sps = VllmDecoder(
        spec_llm, tokenizer, num_draft_tokens=job["m"], sampler_name="sps", sampling=sampling
    )
    sps_records = [run(sps, seed) for seed in range(job["seeds"], job["seeds"] + 3)]
    spec_llm.collective_rpc(remove_patch)
    try:
        run(spec, 99)
        refusal = None
    except RuntimeError as error:
        refusal = str(error)
    spec_llm.collective_rpc(install, args=('{"name": "cactus", "delta": 1.0}',))
    checks_s = time.perf_counter() - checks_start
    # more requests than slots, all submitted at once: vLLM's continuous batching
    requests = [
        {"prompt_ids": prompt, "max_new_tokens": job["batch_tokens"], "seed": 100 + index}
        for index in range(job["batch_requests"])
    ]
    ended: list[int] = []
    start = time.perf_counter()
    batched = spec.generate_batch(requests, job["batch"], on_finish=lambda i, r: ended.append(i))
    batched_wall = time.perf_counter() - start
    batched = [record.to_dict() for record in batched]
    # the drafter folder as vLLM's model registry loads it (its own architecture), a second
    # engine in this process without speculative_config (as the verifier-only arm's), built after
    # the first: the first's counts are unaffected; then the law of the drafter's first token,
    # as vLLM's raw log-probabilities (before temperature / top-k / top-p)
    from vllm import SamplingParams as VllmSamplingParams

    drafter_llm = build_llm(job["drafter"], drafter_id=None, m=0, **common)
    after = run(spec, job["seeds"])
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
                "defaults": {
                    "temperature": defaults.temperature,
                    "top_k": defaults.top_k,
                    "top_p": defaults.top_p,
                },
                "seen": seen,
                "sps_records": sps_records,
                "refusal": refusal,
                "checks_s": checks_s,
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
