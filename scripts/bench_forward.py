"""Forward-path benchmark: HF eager forward vs the fast static-cache forward, eager and compiled.

    python scripts/bench_forward.py                 # SmolLM2-135M verifier if cached, else tiny
    python scripts/bench_forward.py --model tiny --threads 1 --repeats 9

Sections (each printed and appended to results/bench/forward.csv, one row per number):
1. forward: one cached forward over n = 1..5 new tokens at a --context-token cache, the three
   paths interleaved per repeat (medians); decode tok/s = 1 / forward(1); cost(m+1) / cost(1).
2. decode: AutoregressiveDecoder greedy tokens/s (EOS ignored), fast="off" vs compile="on".
3. compile: seconds to warm up (compile) the verifier for the shapes sps decoding uses, in a
   fresh process with an empty inductor cache (cold) and again with that cache (warm).
4. e2e: if the trained drafter exists (or on the tiny pair), SpeculativeDecoder (sps, --e2e-m) over
   AutoregressiveDecoder on each forward path (HF eager, fast eager = the CPU default, fast
   compiled), paper sampling (T 0.6, top-p 0.95, top-k 20), same seeds, interleaved.
Timings on a shared machine are noisy: the 1-minute load average is recorded with every row.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.runtime import ModelRunner, crop_cache
from cactus_bench.samplers import make_sampler

PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
PAPER = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
GREEDY = SamplingParams(temperature=0.0)
PATHS = ("hf_eager", "fast_eager", "fast_compiled")
COLUMNS = ("timestamp", "model", "threads", "load_1m", "section", "path", "n", "metric", "value")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="auto", choices=("auto", "smollm2", "tiny"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: default)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--context", type=int, default=128, help="cached tokens before a forward")
    parser.add_argument("--m", type=int, default=4, help="draft tokens per step (e2e, compile)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--e2e-m", default="1,2,4", help="draft lengths for the e2e section")
    parser.add_argument("--e2e-repeats", type=int, default=3, help="seeds in the e2e section")
    parser.add_argument("--skip", default="", help="comma-separated sections to skip")
    parser.add_argument("--out", default="results/bench/forward.csv")
    parser.add_argument("--probe-compile", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def load_models(choice: str):
    """(name, drafter or None, verifier, tokenizer): SmolLM2 (+ trained drafter) or tiny."""
    if choice in ("auto", "smollm2"):
        from cactus_bench.models.smollm2 import smollm2_dir

        if (smollm2_dir() / "model.safetensors").exists():
            from cactus_bench.models import load_pair

            try:
                pair = load_pair("smollm2_135m", device="cpu", dtype="float32")
                return "smollm2_135m", pair.drafter, pair.verifier, pair.tokenizer
            except FileNotFoundError as error:  # no trained drafter yet: verifier only
                print(f"e2e skipped: {error}")
            from transformers import AutoTokenizer, LlamaForCausalLM

            path = str(smollm2_dir())
            verifier = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            return "smollm2_135m", None, verifier, AutoTokenizer.from_pretrained(path)
        if choice == "smollm2":
            raise SystemExit(f"{smollm2_dir()} is absent: run scripts/prepare_smollm2.py")
        print(f"SmolLM2 not cached at {smollm2_dir()}: benchmarking the tiny pair")
    from cactus_bench.models.tiny import make_tiny_pair

    drafter, verifier, tokenizer = make_tiny_pair(seed=0)
    return "tiny", drafter, verifier, tokenizer


def prompt_ids(tokenizer, length: int) -> list[int]:
    """A chat-formatted prompt cut or repeated to exactly `length` tokens."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return (ids * (length // len(ids) + 1))[:length]


def bench_forward(verifier, tokenizer, args) -> dict[tuple[str, int], float]:
    """Median seconds of one cached forward over n new tokens, per path."""
    device = torch.device("cpu")
    runners = {
        "hf_eager": ModelRunner(verifier, device),
        "fast_eager": FastRunner(verifier, device),
        "fast_compiled": FastRunner(verifier, device, compile=True, sizes=(1, 2, 3, 4, 5)),
    }
    context = prompt_ids(tokenizer, args.context)
    times: dict[tuple[str, int], list[float]] = {(p, n): [] for p in PATHS for n in range(1, 6)}
    with torch.inference_mode():
        runners["fast_compiled"].warmup(args.context + 8)  # before prefill: it recycles the cache
        caches = {
            p: r.prefilled_cache(context, capacity=args.context + 8) for p, r in runners.items()
        }
        for _ in tqdm(range(args.repeats + 1), desc="forward"):  # the first round warms up
            for n in range(1, 6):
                new = torch.tensor([prompt_ids(tokenizer, n)])  # [1, n]
                for path, runner in runners.items():
                    start = time.perf_counter()
                    runner.forward(new, caches[path], all_logits=True)
                    times[path, n].append(time.perf_counter() - start)
                    crop_cache(caches[path], len(context))
    return {key: statistics.median(values[1:]) for key, values in times.items()}


def bench_decode(decoders: dict, prompt: list[int], args, sampling, seeds) -> dict:
    """Median tokens/s of each decoder (interleaved per seed, EOS ignored)."""
    rates: dict[str, list[float]] = {name: [] for name in decoders}
    for seed in tqdm(seeds, desc="decode"):
        for name, decoder in decoders.items():
            rec = decoder.generate(prompt, args.max_new_tokens, seed=seed, sampling=sampling)
            rates[name].append(rec.num_generated / (rec.total_time_s - rec.prefill_time_s))
    return {name: statistics.median(values) for name, values in rates.items()}


def probe_compile(args) -> None:
    """Child process: compile everything AR and sps decoding use (the verifier for 1 and m + 1
    tokens, the drafter for 1 and 2 where there is one) and print the seconds it took."""
    _, drafter, verifier, tokenizer = load_models(args.model)
    context = args.context + args.max_new_tokens
    start = time.perf_counter()
    AutoregressiveDecoder(verifier, tokenizer, eos_token_ids=[], compile="on").warmup(context)
    if drafter is not None:  # the drafter's shapes (1, 2) and the verifier's m + 1
        spec = SpeculativeDecoder(
            drafter,
            verifier,
            tokenizer,
            make_sampler("sps"),
            args.m,
            eos_token_ids=[],
            compile="on",
        )
        spec.warmup(context)
    print(json.dumps({"total_s": time.perf_counter() - start}))


def run_probe(args, cache_dir: str) -> float:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir)
    cmd = [
        sys.executable,
        __file__,
        "--probe-compile",
        "--model",
        args.model,
        "--threads",
        str(args.threads),
        "--context",
        str(args.context),
        "--m",
        str(args.m),
        "--max-new-tokens",
        str(args.max_new_tokens),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"compile probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["total_s"]


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.probe_compile:
        probe_compile(args)
        return
    skip = set(filter(None, args.skip.split(",")))
    name, drafter, verifier, tokenizer = load_models(args.model)
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    rows: list[dict] = []

    def emit(section: str, path: str, n, metric: str, value: float) -> None:
        rows.append(
            dict(
                timestamp=stamp,
                model=name,
                threads=torch.get_num_threads(),
                load_1m=round(os.getloadavg()[0], 2),
                section=section,
                path=path,
                n=n,
                metric=metric,
                value=round(value, 4),
            )
        )
        print(f"{section:8s} {path:14s} n={n!s:4s} {metric:24s} {value:10.3f}")

    if "forward" not in skip:
        seconds = bench_forward(verifier, tokenizer, args)
        for path in PATHS:
            emit("forward", path, 1, "decode_tok_per_s", 1 / seconds[path, 1])
            for n in range(1, 6):
                emit("forward", path, n, "forward_ms", 1e3 * seconds[path, n])
                emit("forward", path, n, "cost_vs_one_token", seconds[path, n] / seconds[path, 1])
        emit(
            "forward",
            "fast_compiled",
            1,
            "speedup_vs_hf_eager",
            seconds["hf_eager", 1] / seconds["fast_compiled", 1],
        )
    prompt = prompt_ids(tokenizer, args.context)
    seeds = list(range(args.repeats))
    if "decode" not in skip:
        decoders = {
            path: AutoregressiveDecoder(
                verifier, tokenizer, eos_token_ids=[], fast=fast, compile=compiled
            )
            for path, fast, compiled in (("hf_eager", "off", "off"), ("fast_compiled", "on", "on"))
        }
        decoders["fast_compiled"].warmup(args.context + args.max_new_tokens)
        rates = bench_decode(decoders, prompt, args, GREEDY, seeds)
        for path, rate in rates.items():
            emit("decode", path, 1, "ar_tok_per_s", rate)
        emit(
            "decode",
            "fast_compiled",
            1,
            "speedup_vs_hf_eager",
            rates["fast_compiled"] / rates["hf_eager"],
        )
    if "compile" not in skip:
        with tempfile.TemporaryDirectory(prefix="inductor_bench_") as cache_dir:
            emit("compile", "fast_compiled", args.m + 1, "cold_s", run_probe(args, cache_dir))
            emit("compile", "fast_compiled", args.m + 1, "warm_s", run_probe(args, cache_dir))
    if "e2e" not in skip and drafter is not None:
        draft_counts = [int(m) for m in args.e2e_m.split(",")]
        arms = {}
        # the three forward paths: HF's, this project's (the CPU default), and compiled (CUDA's)
        e2e_paths = (
            ("hf_eager", "off", "off"),
            ("fast_eager", "on", "off"),
            ("fast_compiled", "on", "on"),
        )
        for path, fast, compiled in e2e_paths:
            arms[path, 0] = AutoregressiveDecoder(
                verifier, tokenizer, eos_token_ids=[], fast=fast, compile=compiled
            )
            for m in draft_counts:
                arms[path, m] = SpeculativeDecoder(drafter, verifier, tokenizer,
                                                   make_sampler("sps"), m, eos_token_ids=[],
                                                   fast=fast, compile=compiled)  # fmt: skip
        for decoder in arms.values():
            decoder.warmup(args.context + args.max_new_tokens)
        rates = bench_decode(arms, prompt, args, PAPER, range(args.e2e_repeats))
        for (path, m), rate in rates.items():
            emit("e2e", path + ("/sps" if m else "/ar"), m, "tok_per_s", rate)
        for path, _, _ in e2e_paths:
            for m in draft_counts:
                emit("e2e", path, m, "sps_speedup", rates[path, m] / rates[path, 0])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new_file:
            writer.writeheader()
        writer.writerows(rows)
    print(f"{len(rows)} rows appended to {out}")


if __name__ == "__main__":
    main()
