"""vLLM's greedy batch-1 decode tokens/s on one prompt; run with a vLLM CPU build's python.

    .venv-vllm/bin/python -m cactus_bench.vllm.decode_rate --model ~/.cache/cactus_bench/\
smollm2-135m-instruct --threads 1 --prompt '[1, 2, 3]'

scripts/bench_forward.py (section `decode`, --vllm-python) calls `vllm_rate`, which runs this
module in that python, between its own repeats. Imports only vLLM (inside `main`, so that
`vllm_rate` imports in an environment without it) and the standard library. Decode rate =
(N - 1) / (t(N tokens) - t(1 token)): the one-token request pays the prefill and the request
overhead, so the difference is N - 1 decode steps, as the HF engine's rate excludes its prefill.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path


def vllm_rate(python: str, model_dir, threads: int, max_new_tokens: int, prompt) -> float:
    """Runs this script with `python` (a vLLM CPU build) and returns its tokens/s."""
    cmd = [
        python,
        "-m",
        "cactus_bench.vllm.decode_rate",
        "--model",
        str(Path(model_dir)),
        "--threads",
        str(threads),
        "--max-new-tokens",
        str(max_new_tokens),
        "--prompt",
        json.dumps(list(prompt)),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"vLLM decode failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["tok_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="HF model folder")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompt", required=True, help="JSON list of token ids")
    parser.add_argument("--compiled", action="store_true", help="no enforce_eager")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))[: args.threads]
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, cores)))
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams, TokensPrompt  # lazy: vLLM is installed only in .venv-vllm

    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        enforce_eager=not args.compiled,
        seed=0,
        kv_cache_memory_bytes=1 << 30,
        max_model_len=2048,
    )
    prompt = TokensPrompt(prompt_token_ids=json.loads(args.prompt))

    def seconds(tokens: int) -> float:
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        start = time.perf_counter()
        llm.generate([prompt], params, use_tqdm=False)
        return time.perf_counter() - start

    seconds(args.max_new_tokens)  # warm-up
    rates = []
    for _ in range(args.repeats):
        one, full = seconds(1), seconds(args.max_new_tokens)
        rates.append((args.max_new_tokens - 1) / (full - one))
    print(json.dumps({"tok_per_s": statistics.median(rates), "rates": rates}))


if __name__ == "__main__":
    main()
