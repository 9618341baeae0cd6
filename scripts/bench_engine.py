"""Engine benchmark: our verifier-only decoder, our speculative decoder and transformers'
assisted generation on the same pair, prompts and sampling, interleaved in one process.

    python scripts/bench_engine.py                      # tiny random pair, sps, m = 4, 128 tokens
    python scripts/bench_engine.py --pair smollm2_135m --m 4 --prompts 4 --repeats 2

Arms: ours_ar (AutoregressiveDecoder), ours_spec (SpeculativeDecoder), hf_assisted
(`generate(assistant_model=...)` with num_assistant_tokens = m, schedule "constant",
assistant_confidence_threshold = 0, do_sample with the same temperature / top-k / top-p) and
hf_ar (plain `generate`). EOS is ignored so every request makes exactly --max-new-tokens tokens.
Appends one row per arm to results/bench/engine.csv and prints the ratios, the engine's own
overhead (wall time outside forwards and the sampler, % of decode time) and the speedup that AL
and the measured draft / verify costs predict.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
from cactus_bench.paper import PAPER
from cactus_bench.samplers import make_sampler

ARMS = ("ours_ar", "ours_spec", "hf_assisted", "hf_ar")
QUESTIONS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May?",
    "Write a short poem about the sea. Do not use any commas.",
    "Explain in two sentences why the sky is blue.",
    "A train travels 60 miles per hour for 3 hours. How far does it go? Answer step by step.",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="tiny", help="'tiny' or a cactus_bench.models name")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, help="model dtype for --pair (default: spec's)")
    parser.add_argument("--m", type=int, default=4, help="draft tokens per step")
    parser.add_argument("--sampler", default="sps")
    parser.add_argument("--delta", type=float, default=None, help="cactus budget")
    parser.add_argument("--temperature", type=float, default=PAPER.temperature)
    parser.add_argument("--top-p", type=float, default=PAPER.top_p)
    parser.add_argument("--top-k", type=int, default=PAPER.top_k)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=4, help=f"at most {len(QUESTIONS)}")
    parser.add_argument("--repeats", type=int, default=3, help="seeds per prompt")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: default)")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset")
    parser.add_argument("--out", default="results/bench/engine.csv")
    args = parser.parse_args()
    arms = tuple(args.arms.split(","))
    if not set(arms) <= set(ARMS) or "ours_ar" not in arms:
        parser.error(f"--arms must include ours_ar and be drawn from {', '.join(ARMS)}")
    if not 1 <= args.prompts <= len(QUESTIONS):
        parser.error(f"--prompts must be in 1..{len(QUESTIONS)}")
    args.arms = arms
    return args


def load_models(args):
    """(drafter, verifier, tokenizer, token_map, chat_template_kwargs)."""
    if args.pair == "tiny":
        from cactus_bench.models.tiny import make_tiny_pair

        drafter, verifier, tokenizer = make_tiny_pair(seed=0)
        dtype = getattr(torch, args.dtype) if args.dtype else torch.float32
        drafter, verifier = drafter.to(args.device, dtype), verifier.to(args.device, dtype)
        return drafter, verifier, tokenizer, None, {}
    try:
        from cactus_bench.models import load_pair
    except ImportError as error:
        raise SystemExit(
            f"--pair {args.pair} needs cactus_bench.models.load_pair ({error})"
        ) from None
    pair = load_pair(args.pair, device=args.device, dtype=args.dtype)
    return pair.drafter, pair.verifier, pair.tokenizer, pair.token_map, pair.chat_template_kwargs


def encode_prompts(tokenizer, chat_kwargs: dict, count: int) -> list[list[int]]:
    prompts = []
    for question in QUESTIONS[:count]:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": question}],
            add_generation_prompt=True,
            tokenize=False,
            **chat_kwargs,
        )
        prompts.append(tokenizer(text, add_special_tokens=False)["input_ids"])
    return prompts


@contextmanager
def assisted_config(drafter, verifier, m: int):
    """Fixed draft length for HF (ECOSYSTEM.md) and no EOS, restored afterwards."""
    saved = [
        (cfg, cfg.to_dict()) for cfg in (drafter.generation_config, verifier.generation_config)
    ]
    drafter.generation_config.num_assistant_tokens = m
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    drafter.generation_config.assistant_confidence_threshold = 0
    for cfg, _ in saved:
        cfg.eos_token_id = None
    try:
        yield
    finally:
        for cfg, values in saved:
            for key in (
                "num_assistant_tokens",
                "num_assistant_tokens_schedule",
                "assistant_confidence_threshold",
                "eos_token_id",
            ):
                setattr(cfg, key, values.get(key))


def make_runners(args, drafter, verifier, tokenizer, token_map):
    """arm -> callable(prompt_ids, seed) -> (new_tokens, seconds, RequestRecord or None)."""
    sampling = SamplingParams(args.temperature, args.top_p, args.top_k)
    rule = make_sampler(args.sampler, **({"delta": args.delta} if args.delta is not None else {}))
    ours_ar = AutoregressiveDecoder(
        verifier, tokenizer, sampling=sampling, eos_token_ids=[], device=args.device
    )
    ours_spec = SpeculativeDecoder(
        drafter,
        verifier,
        tokenizer,
        rule,
        num_draft_tokens=args.m,
        sampling=sampling,
        eos_token_ids=[],
        device=args.device,
        token_map=token_map,
    )
    hf_kwargs = dict(
        do_sample=args.temperature > 0,
        max_new_tokens=args.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id or 0,
    )
    if args.temperature > 0:
        hf_kwargs.update(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k)

    def ours(decoder):
        def run(prompt, seed):
            record = decoder.generate(prompt, args.max_new_tokens, seed=seed)
            return record.num_generated, record.total_time_s, record

        return run

    def hf(assistant):
        def run(prompt, seed):
            torch.manual_seed(seed)
            ids = torch.tensor([prompt], device=args.device)
            sync()
            start = time.perf_counter()
            with torch.inference_mode():
                out = verifier.generate(
                    ids, attention_mask=torch.ones_like(ids), assistant_model=assistant, **hf_kwargs
                )
            sync()
            return out.shape[1] - ids.shape[1], time.perf_counter() - start, None

        return run

    def sync():
        if torch.device(args.device).type == "cuda":
            torch.cuda.synchronize()

    return {
        "ours_ar": ours(ours_ar),
        "ours_spec": ours(ours_spec),
        "hf_assisted": hf(drafter),
        "hf_ar": hf(None),
    }


def summarise(arm: str, runs: list) -> dict:
    tokens = sum(run[0] for run in runs)
    seconds = sum(run[1] for run in runs)
    row = {
        "arm": arm,
        "requests": len(runs),
        "new_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "mean_request_tokens_per_s": sum(r[0] / r[1] for r in runs) / len(runs),
    }
    records = [run[2] for run in runs if run[2] is not None]
    if records:
        steps = sum(r.num_steps for r in records)
        decode = sum(r.total_time_s - r.prefill_time_s for r in records)
        row.update(
            steps=steps,
            accepted_length=sum(sum(r.accepted_per_step) for r in records) / steps,
            tokens_per_step=sum(r.num_generated for r in records) / steps,
            draft_ms_per_step=1e3 * sum(r.draft_time_s for r in records) / steps,
            verify_ms_per_step=1e3 * sum(r.verify_time_s for r in records) / steps,
            sampler_ms_per_step=1e3 * sum(r.sampler_time_s for r in records) / steps,
            overhead_frac=sum(r.overhead_time_s for r in records) / decode,
        )
    return row


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # HF warns about its own assistant config
    drafter, verifier, tokenizer, token_map, chat_kwargs = load_models(args)
    arms = args.arms
    if token_map is not None and "hf_assisted" in arms:
        print("token_map set (different output sizes): transformers' assisted arm skipped")
        arms = tuple(arm for arm in arms if arm != "hf_assisted")
    prompts = encode_prompts(tokenizer, chat_kwargs, args.prompts)
    runners = make_runners(args, drafter, verifier, tokenizer, token_map)
    results: dict[str, list] = defaultdict(list)
    with assisted_config(drafter, verifier, args.m):
        for arm in arms:  # warm-up: first calls pay one-off allocation and dispatch costs
            runners[arm](prompts[0][:8], seed=0)
        jobs = [(p, r) for r in range(args.repeats) for p in range(len(prompts))]
        for index, (prompt_index, repeat) in enumerate(tqdm(jobs, desc="bench_engine")):
            order = arms[index % len(arms) :] + arms[: index % len(arms)]  # rotate who goes first
            for arm in order:
                seed = 1000 * repeat + prompt_index
                results[arm].append(runners[arm](prompts[prompt_index], seed))

    rows = [summarise(arm, results[arm]) for arm in arms]
    base = next(row for row in rows if row["arm"] == "ours_ar")
    ar_token_ms = base["verify_ms_per_step"]  # one verifier forward + processing per token
    for row in rows:
        row["speedup_vs_ours_ar"] = row["tokens_per_s"] / base["tokens_per_s"]
        if row["arm"] == "ours_spec":
            step_ms = row["draft_ms_per_step"] + row["verify_ms_per_step"]
            row["ideal_speedup"] = row["tokens_per_step"] * ar_token_ms / step_ms
    write_csv(args, rows)
    print_report(args, rows)


def write_csv(args, rows: list[dict]) -> None:
    context = {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "pair": args.pair,
        "device": args.device,
        "dtype": args.dtype or "",
        "threads": torch.get_num_threads(),
        "m": args.m,
        "sampler": args.sampler,
        "delta": args.delta,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens,
        "prompts": args.prompts,
        "repeats": args.repeats,
        "torch": torch.__version__,
    }
    metrics = (
        "arm",
        "requests",
        "new_tokens",
        "seconds",
        "tokens_per_s",
        "mean_request_tokens_per_s",
        "speedup_vs_ours_ar",
        "steps",
        "accepted_length",
        "tokens_per_step",
        "draft_ms_per_step",
        "verify_ms_per_step",
        "sampler_ms_per_step",
        "overhead_frac",
        "ideal_speedup",
    )
    columns = list(context) + list(metrics)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")  # missing: empty cell
        if new_file:
            writer.writeheader()
        for row in rows:
            writer.writerow({**context, **{key: row.get(key, "") for key in metrics}})
    print(f"appended {len(rows)} rows to {out}")


def print_report(args, rows: list[dict]) -> None:
    by_arm = {row["arm"]: row for row in rows}
    print(
        f"\npair={args.pair} m={args.m} sampler={args.sampler} T={args.temperature} "
        f"top_p={args.top_p} top_k={args.top_k} tokens={args.max_new_tokens} "
        f"threads={torch.get_num_threads()}"
    )
    print(
        f"{'arm':<12} {'tok/s':>8} {'vs ours_ar':>10} {'AL':>6} {'tok/step':>8} "
        f"{'draft ms':>9} {'verify ms':>9} {'sampler ms':>10} {'overhead':>8}"
    )
    for row in rows:

        def cell(key, fmt, row=row):  # fmt like "6.2f": width then precision
            return format(row[key], fmt) if key in row else "-".rjust(int(fmt.split(".")[0]))

        overhead = f"{100 * row['overhead_frac']:.1f}%" if "overhead_frac" in row else "-"
        print(
            f"{row['arm']:<12} {row['tokens_per_s']:8.1f} {row['speedup_vs_ours_ar']:10.2f} "
            f"{cell('accepted_length', '6.2f')} {cell('tokens_per_step', '8.2f')} "
            f"{cell('draft_ms_per_step', '9.2f')} {cell('verify_ms_per_step', '9.2f')} "
            f"{cell('sampler_ms_per_step', '10.2f')} {overhead:>8}"
        )
    spec = by_arm.get("ours_spec")
    if spec:
        print(
            f"speculative: measured speedup {spec['speedup_vs_ours_ar']:.2f}x, ideal from AL and "
            f"draft/verify costs {spec['ideal_speedup']:.2f}x"
        )
    for ours, theirs in (("ours_spec", "hf_assisted"), ("ours_ar", "hf_ar")):
        if ours in by_arm and theirs in by_arm:
            ratio = by_arm[ours]["tokens_per_s"] / by_arm[theirs]["tokens_per_s"]
            print(f"{ours} / {theirs}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
