"""Distil a small drafter for SmolLM2-135M-Instruct on a CPU (called by `make drafter`).

Two phases, both resumable (rerun the same command after a stop):
1. teacher data (training/teacher.py): the verifier answers training prompts
   (GSM8K train and templated instructions, prompts.py) in batches with a KV cache,
   sampled at T 0.6, top-p 0.95, top-k 20; its top-64 raw logits at every generated position
   are cached in shards, until --gen-tokens tokens exist or --gen-minutes have passed;
2. distillation (training/distill.py): 3 decoder layers initialised from
   verifier layers, the verifier's frozen embeddings, a head restricted to the ids with most
   teacher mass, trained for --train-minutes against the teacher's processed distribution; the
   held-out curve (per-token acceptance 1 - TV) goes to train.log, the best held-out weights to
   cactus_bench/models/assets/;
3. calibration (training/train.py, ~1 CPU minute): the committed drafter's
   logit scale (a temperature for its head) is fitted on the same held-out training-split
   prompts and written to its JSON config. Rerunning after the budget is spent only redoes
   this phase.
Everything lives under the run directory (default <cache>/drafter_v2, cache = $CACTUS_BENCH_CACHE
or ~/.cache/cactus_bench): shards/, checkpoint.pt, train.log. One torch thread by default.

Usage: python scripts/train_drafter.py [--gen-tokens 600000] [--train-minutes 80]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from cactus_bench.models.drafter import SMOLLM2_DRAFTER_CONFIG, SMOLLM2_DRAFTER_WEIGHTS
from cactus_bench.models.smollm2 import cache_root, prepare_smollm2
from training.prompts import check_no_overlap, drafter_prompts, gsm8k_train
from training.teacher import TeacherSettings, generate_shards

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


def make_logger(run_dir: Path):
    def log(message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        print(line, flush=True)
        with open(run_dir / "train.log", "a") as fh:
            fh.write(line + "\n")

    return log


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--run-dir", type=Path, default=None, help="default: <cache>/drafter_v2")
    add("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    add("--weights", type=Path, default=SMOLLM2_DRAFTER_WEIGHTS)
    add("--config", type=Path, default=SMOLLM2_DRAFTER_CONFIG)
    add("--threads", type=int, default=1)
    add("--seed", type=int, default=0)
    # phase 1: teacher data
    add("--gen-tokens", type=int, default=600_000, help="stop generating at this many tokens")
    add("--gen-minutes", type=float, default=600.0, help="... or after this many minutes")
    add("--num-instruction", type=int, default=12_000, help="instruction prompts in the mix")
    add("--math-share", type=float, default=0.5, help="share of GSM8K-train prompts in the mix")
    add("--gen-batch", type=int, default=64)
    add("--max-new-tokens", type=int, default=256)
    # phase 2: distillation
    add("--train-minutes", type=float, default=80.0, help="CPU minutes")
    add("--init-layers", type=int, nargs="+", default=[0, 1, 29])
    add("--subset-size", type=int, default=8192)
    add(
        "--prior-share",
        type=float,
        default=0.25,
        help="weight of the training texts' token counts when choosing the head's ids",
    )
    add("--loss", choices=["kl", "tv", "kl+tv"], default="kl+tv")
    add(
        "--target",
        choices=["processed", "raw"],
        default="processed",
        help="teacher distribution: processed (T, top-k, top-p) or raw at T",
    )
    add("--lr", type=float, default=7e-4)
    add("--batch-tokens", type=int, default=2048)
    add("--val-every", type=int, default=50, help="every n-th prompt is held out")
    add("--ckpt-minutes", type=float, default=6.0)
    # phase 3: calibration
    add("--no-calibrate", action="store_true", help="keep the drafter's logit scale as it is")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    run_dir = args.run_dir or cache_root() / "drafter_v2"
    run_dir.mkdir(parents=True, exist_ok=True)
    log = make_logger(run_dir)
    model_dir = prepare_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    verifier = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    verifier.requires_grad_(False)
    log(f"args {json.dumps({k: str(v) for k, v in vars(args).items()})}")
    prompts = drafter_prompts(args.data_dir, args.num_instruction, args.seed, args.math_share)
    if args.gen_tokens > 0 and args.gen_minutes > 0:
        check_no_overlap([text for _, text in prompts], args.data_dir)
        settings = TeacherSettings(
            max_new_tokens=args.max_new_tokens, batch_size=args.gen_batch, seed=args.seed
        )
        generate_shards(
            verifier, tokenizer, prompts, run_dir, settings, args.gen_tokens, args.gen_minutes, log
        )
    from training.distill import DistillSettings
    from training.train import calibrate, distill

    fields = {f.name for f in dataclasses.fields(DistillSettings)}
    settings = DistillSettings(**{k: v for k, v in vars(args).items() if k in fields})
    if args.train_minutes > 0:
        prior_texts = [text for _, text in prompts]
        prior_texts += [row["answer"] for row in gsm8k_train(args.data_dir)]
        distill(verifier, tokenizer, run_dir, settings, log, prior_texts)
    if not args.no_calibrate:
        calibrate(verifier, run_dir, settings, log)


if __name__ == "__main__":
    main()
