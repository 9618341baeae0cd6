"""Batched decoding benchmark: throughput of `generate_batch` against batch size, on one CPU.

    python scripts/bench_batch.py                          # SmolLM2-135M pair, fp32, 1 thread
    python scripts/bench_batch.py --pair tiny --tokens 16  # smoke run

Arms, interleaved repeat by repeat so that machine load hits them alike:
- spec_generate / spec_batched: the speculative decoder (cactus, delta 1, m = 2) through
  today's `generate` one request at a time, and through `generate_batch(batch=1)`: the
  batched path must not be slower at batch 1;
- ar_batched at batch 1, 2, 4, 8, 16: the verifier alone; B requests through B slots, so every
  step runs B rows (throughput = generated tokens / wall time of the run, prefills included).
EOS is ignored, so each request makes exactly --tokens tokens. Each arm reports the median and
the min and max over --repeats runs, and the mean milliseconds per decode step from the step
log. Then a profiled verifier-only run at batch 1 and at the largest batch splits a step's time
into linear layers (the output head included), attention, the sampling law and draw, and the
rest (every other operator, operator dispatch and Python; the profiler's own cost lands
there). Appends rows to results/bench/batch.csv with the machine's columns.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import time
from pathlib import Path

import torch

from cactus_bench.bench.engine_arms import encode_prompts
from cactus_bench.bench.machine import machine_facts
from cactus_bench.bench.models import load_named_pair
from cactus_bench.engine import (
    AutoregressiveDecoder,
    BatchRequest,
    SamplingParams,
    SpeculativeDecoder,
)
from cactus_bench.paper import PAPER
from cactus_bench.samplers import make_sampler

COLUMNS = (
    "timestamp",
    "pair",
    "dtype",
    "arm",
    "batch",
    "requests",
    "new_tokens",
    "repeats",
    "tokens_per_s",
    "tokens_per_s_min",
    "tokens_per_s_max",
    "speedup_vs_batch1",
    "ms_per_step",
    "torch",
    "cpu",
    "isa",
    "threads",
    "load_1m",
)
# Operator names (profiler) per part of a step; the first matching part wins.
PARTS = {
    "attention": ("scaled_dot_product", "flash_attention"),
    "linear": ("linear", "addmm", "aten::mm", "matmul", "mkldnn"),
    "sampling": ("topk", "sort", "cumsum", "searchsorted", "softmax", "aminmax", "argmax"),
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="smollm2_135m", help="'tiny' or a registered pair")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batches", default="1,2,4,8,16", help="verifier-only batch sizes")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per request")
    parser.add_argument("--spec-requests", type=int, default=4, help="requests, speculative arms")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: default)")
    parser.add_argument("--out", default="results/bench/batch.csv")
    return parser.parse_args()


def requests_for(prompts: list[list[int]], count: int, tokens: int) -> list[BatchRequest]:
    return [BatchRequest(prompts[i % len(prompts)], tokens, seed=i) for i in range(count)]


def timed(call) -> tuple[float, list]:
    start = time.perf_counter()
    records = call()
    return time.perf_counter() - start, records


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    drafter, verifier, tokenizer, token_map, chat_kwargs = load_named_pair(
        args.pair, "cpu", args.dtype
    )
    prompts = encode_prompts(tokenizer, chat_kwargs, 4)
    batches = [int(b) for b in args.batches.split(",")]
    sampling = SamplingParams(PAPER.temperature, PAPER.top_p, PAPER.top_k)
    spec = SpeculativeDecoder(
        drafter,
        verifier,
        tokenizer,
        make_sampler("cactus", delta=1.0),
        num_draft_tokens=2,
        sampling=sampling,
        eos_token_ids=[],
        token_map=token_map,
    )
    alone = AutoregressiveDecoder(
        verifier, tokenizer, sampling=sampling, eos_token_ids=[], token_map=token_map
    )
    spec_requests = requests_for(prompts, args.spec_requests, args.tokens)

    def spec_generate():
        return [spec.generate(r.prompt_ids, r.max_new_tokens, seed=r.seed) for r in spec_requests]

    arms = {("spec_generate", 1): spec_generate}
    arms[("spec_batched", 1)] = lambda: spec.generate_batch(spec_requests, batch=1)
    for batch in batches:
        batch_requests = requests_for(prompts, batch, args.tokens)
        arms[("ar_batched", batch)] = lambda r=batch_requests, b=batch: alone.generate_batch(r, b)
    for call in arms.values():  # warm-up: packs, allocator, first-call costs
        call()
    samples: dict = {key: [] for key in arms}
    step_ms: dict = {key: [] for key in arms}
    for repeat in range(args.repeats):
        for key, call in arms.items():
            seconds, records = timed(call)
            samples[key].append(sum(r.num_generated for r in records) / seconds)
            steps = sum(r.num_steps for r in records) if key[0] == "spec_generate" else None
            decoder = spec if key[0].startswith("spec") else alone
            if steps is None:
                log = [step for step in decoder.step_log if step.kind == "decode"]
                step_ms[key].append(1e3 * sum(s.draft_s + s.verify_s + s.rule_s for s in log))
                steps = len(log)
            else:
                phases = (r.draft_time_s + r.verify_time_s + r.sampler_time_s for r in records)
                step_ms[key].append(1e3 * sum(phases))
            step_ms[key][-1] /= steps
        print(f"repeat {repeat + 1}/{args.repeats} done")
    rows = summarise(args, samples, step_ms, spec_requests, batches)
    write_rows(Path(args.out), args, rows)
    report(rows)
    profile_split(alone, prompts, args.tokens, [1, max(batches)])


def summarise(args, samples, step_ms, spec_requests, batches) -> list[dict]:
    base = statistics.median(samples[("ar_batched", 1)]) if 1 in batches else None
    rows = []
    for (arm, batch), values in samples.items():
        median = statistics.median(values)
        requests = len(spec_requests) if arm.startswith("spec") else batch
        rows.append(
            {
                "arm": arm,
                "batch": batch,
                "requests": requests,
                "new_tokens": args.tokens,
                "repeats": args.repeats,
                "tokens_per_s": round(median, 2),
                "tokens_per_s_min": round(min(values), 2),
                "tokens_per_s_max": round(max(values), 2),
                "speedup_vs_batch1": round(median / base, 3)
                if arm == "ar_batched" and base
                else "",
                "ms_per_step": round(statistics.median(step_ms[(arm, batch)]), 2),
            }
        )
    return rows


def write_rows(out: Path, args, rows: list[dict]) -> None:
    facts = machine_facts()
    context = {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "pair": args.pair,
        "dtype": args.dtype,
        "torch": torch.__version__,
        **{key: facts[key] for key in ("cpu", "isa", "threads", "load_1m")},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new_file:
            writer.writeheader()
        for row in rows:
            writer.writerow({**context, **row})
    print(f"appended {len(rows)} rows to {out} (cpu: {facts['cpu']}, load {facts['load_1m']})")


def report(rows: list[dict]) -> None:
    print(f"{'arm':<14} {'batch':>5} {'tok/s':>8} {'min':>8} {'max':>8} {'xB1':>6} {'ms/step':>8}")
    for row in rows:
        print(
            f"{row['arm']:<14} {row['batch']:>5} {row['tokens_per_s']:>8} "
            f"{row['tokens_per_s_min']:>8} {row['tokens_per_s_max']:>8} "
            f"{row['speedup_vs_batch1']!s:>6} {row['ms_per_step']:>8}"
        )


def profile_split(decoder, prompts, tokens: int, batches: list[int]) -> None:
    """Per decode step at each batch: CPU ms in linear layers, attention and the rest."""
    from torch.profiler import ProfilerActivity, profile

    for batch in batches:
        batch_requests = requests_for(prompts, batch, tokens)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            decoder.generate_batch(batch_requests, batch)
            wall = time.perf_counter() - start
        steps = sum(step.kind == "decode" for step in decoder.step_log)
        split = dict.fromkeys(PARTS, 0.0)
        for event in prof.key_averages():
            name = event.key.lower()
            part = next((p for p, keys in PARTS.items() if any(k in name for k in keys)), None)
            if part is not None:
                split[part] += event.self_cpu_time_total / 1e3  # ms
        other = 1e3 * wall - sum(split.values())
        per_step = {part: ms / steps for part, ms in {**split, "rest": other}.items()}
        cells = " ".join(f"{part} {ms:.1f}" for part, ms in per_step.items())
        print(f"batch {batch}: ms per step (profiled, prefills included): {cells}")


if __name__ == "__main__":
    main()
