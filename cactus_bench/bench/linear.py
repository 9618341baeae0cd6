"""Linear-layer bench: SmolLM2-135M's matrix shapes over 1..8 rows, per dtype and kernel.

A batch-1 decode step multiplies 1 row by each weight matrix; a verify over m + 1 tokens
multiplies m + 1 rows. With the weights streamed from memory (as in a real step: each copy is
used once per sweep, and the copies together exceed the last-level cache), a good kernel costs
about the same for 1..8 rows. Times are this thread's CPU time (`time.thread_time`, with one
torch thread all the work runs here), which other jobs on a shared machine disturb less than
wall time (they still compete for memory bandwidth and caches). Kernels: `aten` (`F.linear`:
MKL for fp32, oneDNN on the plain weights for bf16) and `onednn` (`cpu_kernels.PackedLinear`,
weights packed once). Run by scripts/bench_linear.py and bench_forward.py's `linear` section.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from cactus_bench.bench.models import DTYPES
from cactus_bench.engine.cpu_kernels import PackedLinear, kernel_label

# (name, out_features, in_features) of SmolLM2-135M: hidden 576, 9 query and 3 key/value heads of
# 64, MLP 1536, vocabulary 49152; the fused ones are what the oneDNN path runs.
SHAPES = (
    ("head", 49152, 576),
    ("gate|up", 1536, 576),
    ("down", 576, 1536),
    ("q|o", 576, 576),
    ("k|v", 192, 576),
    ("qkv fused", 960, 576),
    ("gate_up fused", 3072, 576),
)
KERNELS = ("aten", "onednn")


def bench_linear(rows: range, repeats: int, stream_bytes: float = 512e6, dtypes=DTYPES):
    """{(shape name, dtype name, kernel, rows): median CPU ms per product}, the kernel labels."""
    results, labels = {}, {}
    for name, out_features, in_features in tqdm(SHAPES, desc="linear"):
        for dtype_name, dtype in dtypes.items():
            size = out_features * in_features * dtype.itemsize
            copies = max(2, int(stream_bytes // size))
            plain = [torch.randn(out_features, in_features).to(dtype) for _ in range(copies)]
            calls = {
                "aten": [lambda x, w=w: F.linear(x, w) for w in plain],
                "onednn": [PackedLinear([w], [None]) for w in plain],
            }
            times = {(kernel, n): [] for kernel in KERNELS for n in rows}
            for repeat in range(repeats + 1):  # the first sweep warms up (primitive creation)
                for n in rows:
                    x = torch.randn(1, n, in_features).to(dtype)
                    for kernel in KERNELS:  # interleaved: the same load for both kernels
                        start = time.thread_time()
                        for call in calls[kernel]:
                            call(x)
                        if repeat:
                            times[kernel, n].append((time.thread_time() - start) / copies)
            for (kernel, n), values in times.items():
                results[name, dtype_name, kernel, n] = 1e3 * statistics.median(values)
                labels[dtype_name, kernel, n] = kernel_label(kernel, dtype, n, in_features)
            del plain, calls
    return results, labels


def print_table(results: dict, rows: range) -> None:
    print(f"{'shape':14s} {'dtype':9s} {'kernel':7s} " + " ".join(f"{n:>6d}" for n in rows))
    keys = sorted({key[:3] for key in results}, key=lambda k: (k[1], k[0], k[2]))
    for name, dtype_name, kernel in keys:
        cells = " ".join(f"{results[name, dtype_name, kernel, n]:6.3f}" for n in rows)
        print(f"{name:14s} {dtype_name:9s} {kernel:7s} {cells}")
