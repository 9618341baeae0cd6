"""Engine benchmark: our verifier-only decoder, our speculative decoder and transformers'
assisted generation on the same pair, prompts and sampling, interleaved in one process.

    python scripts/bench_engine.py                      # tiny random pair, sps, m = 4, 128 tokens
    python scripts/bench_engine.py --pair smollm2_135m --m 4 --prompts 4 --repeats 2

Arms: ours_ar (AutoregressiveDecoder), ours_spec (SpeculativeDecoder), hf_assisted
(`generate(assistant_model=...)` with num_assistant_tokens = m, schedule "constant",
assistant_confidence_threshold = 0, do_sample with the same temperature / top-k / top-p) and
hf_ar (plain `generate`); cactus_bench/bench/engine_arms.py runs them. EOS is ignored so every
request makes exactly --max-new-tokens tokens. Appends one row per arm to
results/bench/engine.csv (with the CPU, its ISA and the load average) and prints the ratios, the
engine's own overhead (wall time outside forwards and the sampler, % of decode time) and the
speedup that AL and the measured draft / verify costs predict.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from cactus_bench.bench.engine_arms import (
    ARMS,
    QUESTIONS,
    EngineBench,
    add_ratios,
    append_rows,
    encode_prompts,
    row_context,
    run_arms,
    summarise,
)
from cactus_bench.bench.models import load_named_pair
from cactus_bench.paper import PAPER


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


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # HF warns about its own assistant config
    bench = EngineBench.from_namespace(args)
    drafter, verifier, tokenizer, token_map, chat_kwargs = load_named_pair(
        bench.pair, bench.device, bench.dtype
    )
    arms = bench.arms
    if token_map is not None and "hf_assisted" in arms:
        print("token_map set (different output sizes): transformers' assisted arm skipped")
        arms = tuple(arm for arm in arms if arm != "hf_assisted")
    prompts = encode_prompts(tokenizer, chat_kwargs, bench.prompts)
    results = run_arms(bench, arms, drafter, verifier, tokenizer, token_map, prompts)
    rows = [summarise(arm, results[arm]) for arm in arms]
    add_ratios(rows)
    append_rows(Path(args.out), row_context(bench), rows)
    print_report(bench, rows)


def print_report(bench: EngineBench, rows: list[dict]) -> None:
    by_arm = {row["arm"]: row for row in rows}
    print(
        f"\npair={bench.pair} m={bench.m} sampler={bench.sampler} T={bench.temperature} "
        f"top_p={bench.top_p} top_k={bench.top_k} tokens={bench.max_new_tokens} "
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
