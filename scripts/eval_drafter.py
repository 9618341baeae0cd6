"""Measure the SmolLM2 drafter: per-token acceptance, draft cost, end-to-end speculative speed.

1. Acceptance. The verifier answers held-out prompts (GSM8K *test* questions and IFEval prompts,
   never used in training) at the demo settings; on those answers both models are run teacher-
   forced and the per-token sps acceptance sum_x min(p, q) = 1 - TV(p, q) of the processed
   (temperature, top-k, top-p) distributions is averaged (Leviathan et al.'s alpha per token),
   with a 95% interval from a bootstrap over answers.
2. Cost. Median wall time of one cached decode step (batch 1) of the drafter and the verifier,
   and of a verifier forward over m + 1 tokens, on this machine, with --threads threads.
3. End to end. SpeculativeDecoder(sps, m) against AutoregressiveDecoder on a few prompts:
   measured acceptance, tokens per step, tokens/s and the speedup, next to the cost model
   speedup = E[tokens per step] / (m * c_draft + c_verify(m + 1)) with
   E = (1 - a^(m+1)) / (1 - a) for i.i.d. per-token acceptance a (Leviathan et al., 2023).
The measures live in cactus_bench/bench/drafter_eval.py; this script chooses and reports them.

Usage: python scripts/eval_drafter.py [--weights W --config C] [--out results/bench/x.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from cactus_bench.bench.drafter_eval import (
    CLOCKS,
    acceptance_on,
    cost_report,
    end_to_end,
    held_out_prompts,
    load_smollm2_pair,
    measure_costs,
)
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.models.drafter import SMOLLM2_DRAFTER_CONFIG, SMOLLM2_DRAFTER_WEIGHTS
from cactus_bench.store.bootstrap import per_token_summary
from cactus_bench.store.metadata import device_name
from training.teacher import chat_ids

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=SMOLLM2_DRAFTER_WEIGHTS)
    parser.add_argument("--config", type=Path, default=SMOLLM2_DRAFTER_CONFIG)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--per-source", type=int, default=12, help="held-out prompts per source")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--m", type=int, default=3, help="draft length for end to end and cost")
    parser.add_argument("--max-m", type=int, default=4, help="cost model for m = 1..max_m")
    parser.add_argument("--e2e-prompts", type=int, default=3)
    parser.add_argument("--e2e-tokens", type=int, default=96)
    parser.add_argument("--cost-repeats", type=int, default=21)
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="both models in this dtype",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="step costs: wall time, or this thread's CPU time",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sampling = PAPER_SAMPLING
    pair = load_smollm2_pair(args.weights, args.config, args.dtype)
    report: dict = {
        "drafter": json.loads(args.config.read_text()),
        "threads": args.threads,
        "dtype": args.dtype,
        "cpu": device_name("cpu"),
        "clock": args.clock,
        "sampling": sampling.to_dict(),
    }

    prompts = held_out_prompts(args.data_dir, args.per_source)
    report["acceptance"], answers = {}, []
    for source, texts in prompts.items():
        per_answer = acceptance_on(pair, texts, sampling, args.max_new_tokens)
        answers += per_answer
        report["acceptance"][source] = summary = per_token_summary(per_answer, args.seed)
        print(
            f"acceptance {source}: {summary['mean']:.3f} {summary['ci95']} over "
            f"{summary['tokens']} tokens"
        )
    report["acceptance"]["all"] = per_token_summary(answers, args.seed)
    alpha = report["acceptance"]["all"]["mean"]

    probe = chat_ids(pair.tokenizer, prompts["gsm8k_test"][0])
    times = measure_costs(pair, probe, args.max_m, args.cost_repeats, args.clock)
    report["cost"] = cost = cost_report(times, alpha, args.max_m)
    spread = cost["drafter_over_verifier_per_repeat"]
    print(
        f"cost: drafter step {cost['drafter_step_s'] * 1e3:.1f} ms = "
        f"{cost['drafter_over_verifier']:.3f} of verifier {cost['verifier_step_s'] * 1e3:.1f} ms "
        f"(per-repeat ratio quartiles {spread['q25']:.3f}-{spread['q75']:.3f}); "
        f"verify m + 1 tokens over one: {cost['verify_m_plus_1_over_1']}"
    )

    if args.e2e_prompts > 0:
        texts = (prompts["gsm8k_test"] + prompts["ifeval"])[:: max(1, args.per_source // 2)]
        chosen = texts[: args.e2e_prompts]
        report["end_to_end"] = end_to_end(pair, chosen, sampling, args.m, args.e2e_tokens)
        print(f"end to end: {json.dumps(report['end_to_end'])}")
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
