"""One cached forward over n = 1..8 new tokens, per dtype and forward path (bench_forward.py's
`forward` section): what a verification of m + 1 = n tokens costs against one decode step.
"""

from __future__ import annotations

import statistics
import time

import torch
from tqdm import tqdm

from cactus_bench.bench.decoders import PATHS
from cactus_bench.bench.models import DTYPES
from cactus_bench.engine.cpu_kernels import kernel_label
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.runtime import ModelRunner, crop_cache
from cactus_bench.tasks.prompt_ids import chat_prompt_ids

PROMPT = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "


def prompt_ids(tokenizer, length: int) -> list[int]:
    """A chat-formatted prompt cut or repeated to exactly `length` tokens."""
    ids = chat_prompt_ids(tokenizer, PROMPT, {})
    return (ids * (length // len(ids) + 1))[:length]


def make_runner(path: str, verifier, sizes):  # the runner a decoder on `path` would build
    fast, compiled, kernel = PATHS[path]
    if fast == "off":
        return ModelRunner(verifier, torch.device("cpu"))
    return FastRunner(verifier, torch.device("cpu"), compiled == "on", sizes, kernel)


def path_kernel(path: str, runner, dtype: torch.dtype, n: int) -> str:
    """The kernel label of `path` for a forward over n tokens."""
    if PATHS[path][1] == "on":
        return "inductor + " + kernel_label("aten", dtype, n)
    onednn = isinstance(runner, FastRunner) and runner.uses_packs(n)
    return kernel_label("onednn" if onednn else "aten", dtype, n)


def bench_forward(
    models: dict, tokenizer, paths, context_tokens: int, max_n: int, repeats: int
) -> tuple[dict, dict, dict]:
    """Median wall and CPU seconds (this thread's: less disturbed by other jobs) of one cached
    forward over n = 1..max_n new tokens at a `context_tokens` cache, per (dtype, path, n),
    interleaved over `repeats` rounds; and each one's kernel label. `models` maps a dtype name
    to the verifier in that dtype."""
    sizes = tuple(range(1, max_n + 1))
    runners = {(d, p): make_runner(p, models[d], sizes) for d in models for p in paths}
    context = prompt_ids(tokenizer, context_tokens)
    times = {(*key, n): [] for key in runners for n in sizes}
    cpu_times = {key: [] for key in times}
    with torch.inference_mode():
        for runner in runners.values():
            if hasattr(runner, "warmup"):  # before prefill: it recycles the cache
                runner.warmup(context_tokens + max_n)
        capacity = context_tokens + max_n
        caches = {key: r.prefilled_cache(context, capacity=capacity) for key, r in runners.items()}
        for repeat in tqdm(range(repeats + 1), desc="forward"):  # the first warms up
            for n in sizes:
                new = torch.tensor([prompt_ids(tokenizer, n)])  # [1, n]
                for key, runner in runners.items():
                    start, cpu_start = time.perf_counter(), time.thread_time()
                    runner.forward(new, caches[key], all_logits=True)
                    if repeat:
                        times[(*key, n)].append(time.perf_counter() - start)
                        cpu_times[(*key, n)].append(time.thread_time() - cpu_start)
                    crop_cache(caches[key], len(context))
    labels = {
        (d, p, n): path_kernel(p, runners[d, p], DTYPES[d], n) for d, p in runners for n in sizes
    }
    wall = {key: statistics.median(values) for key, values in times.items()}
    cpu = {key: statistics.median(values) for key, values in cpu_times.items()}
    return wall, cpu, labels
