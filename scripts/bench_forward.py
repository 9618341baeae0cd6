"""Forward-path benchmark on this CPU: kernels, forwards over 1..8 tokens, decode, end to end.

    python scripts/bench_forward.py                 # SmolLM2-135M (+ drafter) if cached, else tiny
    python scripts/bench_forward.py --skip linear,compile --repeats 9 --vllm-python PATH

Every row names the CPU, its instruction set, the dtype and the kernel path taken (oneDNN's
verbose log, `cpu_kernels.kernel_label`); rows go to results/bench/forward.csv. Sections:
1. linear: F.linear on SmolLM2's matrices over 1..8 rows, fp32 and bf16, ATen vs packed oneDNN
   (cactus_bench/bench/linear.py), CPU ms. Then draw: the drafter's token draw (torch.multinomial
   vs the engine's sample_token) and subset head (module vs packed) alone (bench/draw.py),
   CPU ms (median and quartiles of 20 x --repeats calls).
2. forward: one cached forward over n = 1..8 new tokens at a --context-token cache, per dtype
   and path (hf_eager, fast_aten, fast = the default: oneDNN packs), interleaved per repeat;
   wall and CPU time (this thread's, less disturbed by other jobs); decode tok/s = 1 / wall
   forward(1); cost(n) / cost(1) in CPU time is what a verify of m + 1 = n tokens costs in
   decode steps.
3. decode: AutoregressiveDecoder greedy tokens/s (EOS ignored) per dtype and path; with
   --vllm-python, vLLM's CPU build on the same model, dtype and thread count (a separate
   process, cactus_bench/vllm/decode_rate.py), run between our repeats.
4. compile: seconds to compile the verifier for the shapes sps decoding uses (fp32), cold and warm.
5. e2e: SpeculativeDecoder (sps, --e2e-m) over AutoregressiveDecoder per dtype on the default
   path, paper sampling (T 0.6, top-p 0.95, top-k 20), same seeds, interleaved.
Timings on a shared machine are noisy: the 1-minute load average is recorded with every row.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from cactus_bench.bench.decoders import bench_decode, decoder_for
from cactus_bench.bench.draw import bench_draw
from cactus_bench.bench.forward import bench_forward, path_kernel, prompt_ids
from cactus_bench.bench.greedy import GREEDY
from cactus_bench.bench.linear import SHAPES, bench_linear, print_table
from cactus_bench.bench.machine import machine_facts
from cactus_bench.bench.models import DTYPES, load_models
from cactus_bench.engine.cpu_kernels import cpu_info, kernel_label
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.vllm.decode_rate import vllm_rate

COLUMNS = (
    "timestamp",
    "model",
    "cpu",
    "isa",
    "threads",
    "load_1m",
    "section",
    "path",
    "dtype",
    "kernel",
    "n",
    "metric",
    "value",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="auto", choices=("auto", "smollm2", "tiny"))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (0: default)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--context", type=int, default=128, help="cached tokens before a forward")
    parser.add_argument("--max-n", type=int, default=8, help="forward section: n = 1..max-n")
    parser.add_argument("--paths", default="hf_eager,fast_aten,fast", help="forward/decode paths")
    parser.add_argument("--m", type=int, default=4, help="draft tokens per step (compile)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--e2e-m", default="1,2,3,4", help="draft lengths for the e2e section")
    parser.add_argument("--e2e-repeats", type=int, default=3, help="seeds in the e2e section")
    parser.add_argument(
        "--vllm-python",
        default=os.environ.get("CACTUS_BENCH_VLLM_PYTHON"),
        help="python of a vLLM CPU build, for the decode section",
    )
    parser.add_argument("--skip", default="", help="comma-separated sections to skip")
    parser.add_argument("--out", default="results/bench/forward.csv")
    parser.add_argument("--probe-compile", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args()


def probe_compile(args) -> None:
    """Child process: compile everything AR and sps decoding use (fp32) and print the seconds."""
    _, drafter, verifier, tokenizer, _ = load_models(args.model, torch.float32)
    context = args.context + args.max_new_tokens
    start = time.perf_counter()
    decoder_for("fast_compiled", verifier, tokenizer).warmup(context)
    if drafter is not None:  # the drafter's shapes (1, 2) and the verifier's m + 1
        decoder_for("fast_compiled", verifier, tokenizer, drafter, args.m).warmup(context)
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
    skip, paths = set(filter(None, args.skip.split(","))), args.paths.split(",")
    loaded = {d: load_models(args.model, dtype) for d, dtype in DTYPES.items()}
    name, _, _, tokenizer, model_dir = loaded["float32"]
    verifiers = {d: value[2] for d, value in loaded.items()}
    stamp = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    info = cpu_info()
    print(f"CPU: {info.model}; ISA: {info.isa}; native bf16: {info.native_bf16}")

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and out.read_text().partition("\n")[0] != ",".join(COLUMNS):
        raise SystemExit(f"{out} has other columns (an older benchmark); move it or pass --out")

    def emit(section, path, dtype, kernel, n, metric, value) -> None:  # one CSV row, appended now
        row = {
            "timestamp": stamp,
            "model": name,
            **machine_facts(),
            "section": section,
            "path": path,
            "dtype": dtype,
            "kernel": kernel,
            "n": n,
            "metric": metric,
            "value": round(value, 4),
        }
        new_file = not out.exists()
        with out.open("a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS)
            if new_file:
                writer.writeheader()
            writer.writerow(row)
        print(f"{section:7s} {path:14s} {dtype:8s} n={n!s:2s} {metric:18s} {value:9.3f}  {kernel}")

    if "linear" not in skip:
        sizes = range(1, args.max_n + 1)
        results, labels = bench_linear(sizes, args.repeats)
        print_table(results, sizes)
        shapes = {shape: f"{shape} {out}x{inp}" for shape, out, inp in SHAPES}
        for (shape, dtype, kernel, n), ms in results.items():
            emit("linear", shapes[shape], dtype, labels[dtype, kernel, n], n, "cpu_ms", ms)
    drafters = {d: value[1] for d, value in loaded.items()}
    if "draw" not in skip and None not in drafters.values():
        for (part, dtype, way), spread in bench_draw(drafters, 20 * args.repeats).items():
            for metric, value in zip(("cpu_ms", "cpu_ms_q25", "cpu_ms_q75"), spread, strict=True):
                emit("draw", part, dtype, way, 1, metric, value)
    if "forward" not in skip:
        seconds, cpu_seconds, labels = bench_forward(
            verifiers, tokenizer, paths, args.context, args.max_n, args.repeats
        )
        for (dtype, path, n), value in seconds.items():
            label, cpu = labels[dtype, path, n], cpu_seconds[dtype, path, n]
            emit("forward", path, dtype, label, n, "forward_ms", 1e3 * value)
            emit("forward", path, dtype, label, n, "forward_cpu_ms", 1e3 * cpu)
            ratio = cpu / cpu_seconds[dtype, path, 1]
            emit("forward", path, dtype, label, n, "cost_vs_one_token_cpu", ratio)
            if n == 1:
                emit("forward", path, dtype, label, 1, "decode_tok_per_s", 1 / value)
    prompt = prompt_ids(tokenizer, args.context)
    if "decode" not in skip:
        decoders = {(d, p): decoder_for(p, verifiers[d], tokenizer) for d in DTYPES for p in paths}

        def between(seed: int) -> dict:  # vLLM in 3 of the rounds (~1 min a call: start-up)
            if not (args.vllm_python and model_dir) or seed % max(1, args.repeats // 3):
                return {}
            rate = vllm_rate(args.vllm_python, model_dir, args.threads, args.max_new_tokens, prompt)
            return {("bfloat16", "vllm_eager"): rate}

        rates, cpu_rates = bench_decode(
            decoders, prompt, args, GREEDY, range(args.repeats), between
        )
        for (dtype, path), rate in rates.items():
            kernel = (
                "vLLM CPU build"
                if path.startswith("vllm")
                else path_kernel(path, decoders[dtype, path].verifier, DTYPES[dtype], 1)
            )
            emit("decode", path, dtype, kernel, 1, "ar_tok_per_s", rate)
            if (dtype, path) in cpu_rates:
                emit("decode", path, dtype, kernel, 1, "ar_tok_per_cpu_s", cpu_rates[dtype, path])
    if "compile" not in skip:
        with tempfile.TemporaryDirectory(prefix="inductor_bench_") as cache_dir:
            label = "inductor + " + kernel_label("aten", torch.float32, 1)
            for metric in ("cold_s", "warm_s"):
                emit(
                    "compile",
                    "fast_compiled",
                    "float32",
                    label,
                    args.m + 1,
                    metric,
                    run_probe(args, cache_dir),
                )
    if "e2e" not in skip and loaded["float32"][1] is not None:
        draft_counts = [int(m) for m in args.e2e_m.split(",")]
        arms = {}
        for dtype, (_, drafter, verifier, _, _) in loaded.items():
            arms[dtype, 0] = decoder_for("fast", verifier, tokenizer)
            for m in draft_counts:
                arms[dtype, m] = decoder_for("fast", verifier, tokenizer, drafter, m)
        rates, cpu_rates = bench_decode(arms, prompt, args, PAPER_SAMPLING, range(args.e2e_repeats))
        for (dtype, m), rate in rates.items():
            kernel = path_kernel("fast", arms[dtype, m].verifier, DTYPES[dtype], m + 1)
            cpu_rate, arm = cpu_rates[dtype, m], "fast/sps" if m else "fast/ar"
            emit("e2e", arm, dtype, kernel, m, "tok_per_s", rate)
            emit("e2e", arm, dtype, kernel, m, "tok_per_cpu_s", cpu_rate)
            if m:
                emit("e2e", "fast", dtype, kernel, m, "sps_speedup", rate / rates[dtype, 0])
                speedup = cpu_rate / cpu_rates[dtype, 0]
                emit("e2e", "fast", dtype, kernel, m, "sps_speedup_cpu", speedup)
    print(f"rows appended to {out}")


if __name__ == "__main__":
    main()
