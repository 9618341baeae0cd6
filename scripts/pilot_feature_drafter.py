"""Go/no-go pilot of a feature-level (EAGLE-1 style) drafter for SmolLM2-135M-Instruct.

Phases (each resumable; rerun the same command after a stop):
1. collect: the verifier answers training-split prompts (the distilled drafter's mix: GSM8K
   train and templated instructions, drafter_training/data.py) at the paper's sampling; its last
   hidden state at every position and its processed law at every answer position are cached
   (cactus_bench/feature_drafter/collect.py) until --train-tokens answer tokens exist;
2. held-out: the same for GSM8K *test* questions and the demo prompts (evaluation only);
3. train: the head (feature_drafter/head.py) is distilled for --train-minutes CPU minutes,
   checkpointed, with the held-out curve in curve.csv;
4. eval: position-1 acceptance sum_x min(p, q) on every held-out answer position, for the head
   and for the committed distilled drafter on the same positions, with bootstrap intervals over
   answers, and the step cost of the head against a verifier step; JSON to --out.
Everything large lives under --run-dir (default <cache>/feature_drafter_pilot), never in git.

Usage: python scripts/pilot_feature_drafter.py {collect,held-out,train,eval} [options]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, LlamaForCausalLM

from cactus_bench.drafter_training.data import check_no_overlap, drafter_prompts
from cactus_bench.drafter_training.shards import load_shards, split_records
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.feature_drafter import acceptance as acc
from cactus_bench.feature_drafter.collect import CollectSettings, collect_shards
from cactus_bench.feature_drafter.cost import step_costs
from cactus_bench.feature_drafter.head import FeatureHead
from cactus_bench.feature_drafter.report import calibrate, write_report
from cactus_bench.feature_drafter.train import HeadSettings, train_head
from cactus_bench.models.drafter import SMOLLM2_DRAFTER_WEIGHTS, load_drafter
from cactus_bench.models.smollm2 import cache_root, prepare_smollm2

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"
DEMO_PROMPTS = Path(__file__).resolve().parents[1] / "cactus_bench/tasks/demo_prompts.jsonl"


def make_logger(run_dir: Path):
    def log(message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        print(line, flush=True)
        with open(run_dir / "pilot.log", "a") as fh:
            fh.write(line + "\n")

    return log


def held_out_prompts(data_dir: Path, gsm8k_count: int) -> list[tuple[str, str]]:
    """The first ``gsm8k_count`` GSM8K test questions and every demo prompt, as (source, text)."""
    path = data_dir / "gsm8k" / "test.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; pass --data-dir pointing at the shared data")
    with open(path) as fh:
        lines = [line for _, line in zip(range(gsm8k_count), fh, strict=False)]
    prompts = [("gsm8k_test", json.loads(line)["question"]) for line in lines]
    with open(DEMO_PROMPTS) as fh:
        prompts += [("demo", json.loads(line)["prompt"]) for line in fh if line.strip()]
    return prompts


def load_verifier():
    model_dir = prepare_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    verifier = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    verifier.requires_grad_(False)
    return verifier, tokenizer


def collect(args, log, held_out: bool) -> None:
    if held_out:
        prompts = held_out_prompts(args.data_dir, args.held_out_gsm8k)
        run_dir, target = args.run_dir / "held_out", 10**12
    else:
        prompts = drafter_prompts(args.data_dir, args.num_instruction, args.seed)
        check_no_overlap([text for _, text in prompts], args.data_dir)
        run_dir, target = args.run_dir / "train", args.train_tokens
    verifier, tokenizer = load_verifier()
    # Held-out answers get their own seed stream, so they never repeat a training shard's draws.
    seed = args.seed + (7919 if held_out else 0)
    settings = CollectSettings(max_new_tokens=args.max_new_tokens, batch_size=args.batch, seed=seed)
    part, parts = args.part
    total = collect_shards(
        verifier, tokenizer, prompts, run_dir, settings, target, log, part=part, parts=parts
    )
    log(f"collect ({'held-out' if held_out else 'train'}) done: {total} answer tokens")


def subset_ids() -> torch.Tensor:
    """The committed distilled drafter's head ids (chosen from its training-split teacher mass):
    both drafters then propose from the same 8192 tokens."""
    return load_file(str(SMOLLM2_DRAFTER_WEIGHTS))["head.token_ids"].long()


def head_settings(args):
    return HeadSettings(
        train_minutes=args.train_minutes,
        lr=args.lr,
        batch_tokens=args.batch_tokens,
        ckpt_minutes=args.ckpt_minutes,
        seed=args.seed,
    )


def train(args, log) -> None:
    verifier, _ = load_verifier()
    train_head(verifier, subset_ids(), args.run_dir, head_settings(args), log)


def trained_head(verifier, run_dir: Path):
    ckpt = torch.load(run_dir / "head.pt")
    head = FeatureHead(verifier, ckpt["token_ids"])
    head.load_state_dict(ckpt["head"], strict=False)
    return head.eval(), ckpt["state"]


def evaluate(args, log) -> None:
    verifier, _ = load_verifier()
    head, state = trained_head(verifier, args.run_dir)
    drafter = load_drafter(verifier)  # the committed distilled drafter, its own logit scale
    train_records, collected = load_shards(args.run_dir / "train", state["shards"])
    _, val = split_records(train_records, head_settings(args).val_every)
    held_out, _ = load_shards(args.run_dir / "held_out")
    scale, grid = calibrate(head, val, subset_ids(), verifier.config.vocab_size)
    log(f"head logit scale {scale} (training-split val grid {grid})")
    results: dict = {"head": {}, "drafter": {}, "difference": {}}
    per = {"head": {}, "drafter": {}}
    for source in ("gsm8k_test", "demo", "all"):
        picked = [r for r in held_out if source in ("all", r["source"])]
        per["head"][source] = acc.head_acceptance(head, picked, PAPER_SAMPLING)
        per["drafter"][source] = acc.drafter_acceptance(drafter, picked, PAPER_SAMPLING)
        for name in ("head", "drafter"):
            results[name][source] = acc.summary(per[name][source], args.seed)
        results["difference"][source] = acc.paired_difference(
            per["head"][source], per["drafter"][source], args.seed
        )
        log(f"{source}: head {results['head'][source]} drafter {results['drafter'][source]}")
    head.lm_head.logit_scale = 1.0
    unscaled = acc.summary(acc.head_acceptance(head, held_out, PAPER_SAMPLING), args.seed)
    head.lm_head.logit_scale = scale
    # The step cost is timed at the position after --cost-context tokens of a held-out answer.
    probe = next(r for r in held_out if len(r["ids"]) > args.cost_context + 1)
    probe = {
        "ids": probe["ids"][: args.cost_context + 1],
        "features": probe["features"][: args.cost_context],
    }
    costs = step_costs(head, drafter, verifier, probe, args.cost_repeats)
    log(f"step costs {costs}")
    val_drafter = acc.summary(acc.drafter_acceptance(drafter, val, PAPER_SAMPLING), args.seed)
    write_report(
        args, results, unscaled, scale, grid, costs, collected, state, val_drafter, held_out
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["collect", "held-out", "train", "eval"])
    add = parser.add_argument
    add("--run-dir", type=Path, default=None, help="default: <cache>/feature_drafter_pilot")
    add("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    add("--threads", type=int, default=1)
    add("--seed", type=int, default=0)
    add("--train-tokens", type=int, default=200_000, help="training answer tokens to collect")
    add("--num-instruction", type=int, default=12_000, help="instruction prompts in the mix")
    add(
        "--held-out-gsm8k",
        type=int,
        default=44,
        help="GSM8K test questions held out (with the 20 demo prompts: one batch of 64)",
    )
    add("--batch", type=int, default=64)
    add("--max-new-tokens", type=int, default=256)
    add("--train-minutes", type=float, default=40.0, help="CPU minutes of training")
    add(
        "--part",
        type=int,
        nargs=2,
        default=(0, 1),
        metavar=("K", "N"),
        help="collect: write only shards K mod N (N processes on N cores)",
    )
    add("--lr", type=float, default=1e-3)
    add("--batch-tokens", type=int, default=4096, help="padded head positions per batch")
    add("--ckpt-minutes", type=float, default=4.0, help="CPU minutes between curve points")
    add("--cost-repeats", type=int, default=11)
    add("--cost-context", type=int, default=128, help="context tokens before the timed step")
    add("--out", type=Path, default=Path("results/bench/feature_drafter_pilot.json"))
    add("--plot", type=Path, default=Path("results/bench/feature_drafter_pilot_curve.png"))
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.run_dir = args.run_dir or cache_root() / "feature_drafter_pilot"
    args.run_dir.mkdir(parents=True, exist_ok=True)
    log = make_logger(args.run_dir)
    if args.phase in ("collect", "held-out"):
        collect(args, log, held_out=args.phase == "held-out")
    elif args.phase == "train":
        train(args, log)
    else:
        evaluate(args, log)


if __name__ == "__main__":
    main()
