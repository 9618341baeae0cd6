"""One backend, run as a subprocess of tests/test_vllm_agreement.py: the HF engine with one rule,
or one vLLM engine with every rule in turn.

Reads a JSON job on stdin, prints one line `RESULT <json>`.
  backend "vllm": one engine built for `batch` requests at once, with the first of the job's
    rules as a run starts it (the rule in RULE_ENV before the workers start); each later rule
    replaces it in the engine's worker (engine_worker.install, as the engine test swaps rules),
    as vLLM's import and an engine start cost more than a rule's decodes (2026-12-06, 2-core
    Xeon, load 8-15, CACTUS_BENCH_AGREEMENT_SCALE=0.1: 96 + 153 s against 14 s a rule). Per rule,
    the pooled spec-decode counts of decoding every (prompt, seed) request, and for the rule
    named by `law_rule` the first two tokens of many seeded requests of one prompt (the
    first-token law test).
  backend "hf": this project's SpeculativeDecoder, HF_BATCH requests at a time (continuous
    batching; a request's seed gives it the draws `generate` would), one torch thread; the steps
    drafting / accepting at least j+1 drafts. A subprocess so the rules decode in parallel.
"""

from __future__ import annotations

import json
import sys
import time

STARTED = time.perf_counter()  # the phases' clock: seconds since this worker began

HF_BATCH = 8  # the batched engine decodes the same laws (tests/test_engine_batch*.py), faster


def hf(job: dict) -> dict:
    import torch

    from cactus_bench.engine import SamplingParams, SpeculativeDecoder
    from cactus_bench.models import load_pair
    from cactus_bench.models.registry import get_pair_spec
    from cactus_bench.samplers import make_sampler

    torch.set_num_threads(1)
    seconds = {"import": time.perf_counter() - STARTED}
    m = job["m"]
    # the registered pair itself: the drafter's 8192-id head (vLLM loads the same law)
    pair = load_pair(get_pair_spec("smollm2_135m"), device="cpu", dtype="float32")
    decoder = SpeculativeDecoder(
        pair.drafter,
        pair.verifier,
        pair.tokenizer,
        make_sampler(job["rule"], **job["params"]),
        num_draft_tokens=m,
        sampling=SamplingParams(**job["sampling"]),
        compile="off",
    )
    seconds["load"] = time.perf_counter() - STARTED - seconds["import"]
    drafted, accepted = [0] * m, [0] * m
    requests = [
        {"prompt_ids": ids, "max_new_tokens": job["max_tokens"], "seed": seed}
        for ids, seed in zip(job["prompts"], job["seeds"], strict=True)
    ]
    finished = 0

    def count(index, record) -> None:
        nonlocal finished
        for d, a in zip(record.drafted_per_step, record.accepted_per_step, strict=True):
            for j in range(m):
                drafted[j] += d > j
                accepted[j] += a > j
        finished += 1
        if finished % 10 == 0:
            print(f"HF {job['rule']}: {finished}/{len(requests)} requests", file=sys.stderr)

    clock = time.perf_counter()
    decoder.generate_batch(requests, batch=HF_BATCH, on_finish=count)
    seconds["decode"] = time.perf_counter() - clock
    return {"drafted": drafted, "accepted": accepted, "seconds": seconds}


def main() -> None:
    job = json.loads(sys.stdin.read())
    result = hf(job) if job["backend"] == "hf" else vllm(job)
    print("RESULT " + json.dumps(result), flush=True)


def vllm(job: dict) -> dict:
    from engine_worker import install
    from vllm import SamplingParams

    from cactus_bench.samplers.registry import params_with_defaults
    from cactus_bench.vllm.engines import VllmOptions, build_llm
    from cactus_bench.vllm.outputs import steps_from_metrics

    rules = job["rules"]  # {rule: params}, in order; the first starts the engine
    first = next(iter(rules))
    seconds = {"import": time.perf_counter() - STARTED}
    clock = time.perf_counter()
    llm = build_llm(
        job["verifier"],
        rule=params_with_defaults(first, **rules[first]),
        drafter_id=job["drafter"],
        m=job["m"],
        dtype="float32",
        seed=0,
        options=VllmOptions(enforce_eager=True, batch=job.get("batch", 1)),
    )
    seconds["engine_start"] = time.perf_counter() - clock
    sampling, m = job["sampling"], job["m"]  # temperature, top_p, top_k

    def params(seed: int, max_tokens: int) -> SamplingParams:
        return SamplingParams(**sampling, max_tokens=max_tokens, seed=seed)

    prompts = [{"prompt_token_ids": ids} for ids in job["prompts"]]
    results = {}
    for rule, rule_params in rules.items():
        if rule != first:  # the engine's worker swaps its bridge's rule, nothing else
            (installed,) = llm.collective_rpc(
                install, args=(params_with_defaults(rule, **rule_params).to_json(),)
            )
            assert installed == rule, (installed, rule)
        clock = time.perf_counter()
        outputs = llm.generate(
            prompts, [params(seed, job["max_tokens"]) for seed in job["seeds"]], use_tqdm=False
        )
        seconds[f"decode {rule}"] = time.perf_counter() - clock
        drafted, accepted = [0] * m, [0] * m  # per position j: steps drafting / accepting > j
        for out in outputs:  # vLLM's per-request, per-step counts (engines.py asks for them)
            steps = zip(*steps_from_metrics(out.outputs[0].spec_decode_metrics, m), strict=True)
            for d, a in steps:
                for j in range(m):
                    drafted[j] += d > j
                    accepted[j] += a > j
        result = {
            "drafted": drafted,
            "accepted": accepted,
            "tokens": sum(len(out.outputs[0].token_ids) for out in outputs),
            "seconds": seconds,  # the one worker's phases, shared by its rules
        }
        if rule == job.get("law_rule"):
            seeds = range(job["law_samples"])
            clock = time.perf_counter()
            outputs = llm.generate(
                [{"prompt_token_ids": job["law_prompt"]}] * len(seeds),
                [params(10_000 + seed, 2) for seed in seeds],
                use_tqdm=False,
            )
            result["pairs"] = [list(out.outputs[0].token_ids[:2]) for out in outputs]
            seconds[f"law {rule}"] = time.perf_counter() - clock
        results[rule] = result
    return results


if __name__ == "__main__":
    main()
