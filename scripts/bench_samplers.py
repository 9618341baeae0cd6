"""Benchmark: every acceptance rule's `verify` against the naive materialising path.

At Qwen3's vocabulary (V = 151,936) for B in {1, 8, 32} and m in {5, 10, 20}: median wall time of
the fast path and of `naive_verify` (which builds h and the recovery distribution at every
position, as a straightforward PyTorch implementation does), and the peak extra resident memory
of each, sampled by a background thread. Writes results/bench/samplers.csv and prints a table.

    python scripts/bench_samplers.py                      # the full grid
    python scripts/bench_samplers.py --batch 8 --draft 20 --repeats 5
"""

from __future__ import annotations

import argparse
import csv
import statistics
import threading
import time
from functools import partial
from pathlib import Path

import psutil
import torch
from tqdm import tqdm

from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.naive import naive_verify

RULES = {
    "sps": {},
    "cactus": {"delta": 1.0},
    "cactus_exact": {"delta": 1.0, "divergence": "kl"},
    "tas": {},
    "interp": {"alpha": 0.5},
    "topk": {"k": 5},
    "greedy": {},
}


class PeakRss:
    """Samples this process's resident set size every millisecond while active."""

    def __enter__(self):
        self._proc = psutil.Process()
        self.baseline = self._proc.memory_info().rss
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)

    @property
    def extra_mib(self) -> float:
        return (self.peak - self.baseline) / 2**20


def _inputs(batch: int, m: int, vocab: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    # Peaked, truncated-looking rows like real LM outputs: most mass on a few hundred ids.
    logits_p = torch.randn(batch, m, vocab, generator=gen) * 4
    logits_q = torch.randn(batch, m + 1, vocab, generator=gen) * 4
    p = torch.softmax(logits_p, -1)
    q = torch.softmax(logits_q, -1)
    del logits_p, logits_q
    ids = torch.multinomial(p.reshape(-1, vocab), 1, generator=gen).reshape(batch, m)
    return ids, p, q


def _time(fn, repeats: int) -> tuple[float, float]:
    times, peaks = [], []
    for _ in range(repeats):
        with PeakRss() as mem:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        peaks.append(mem.extra_mib)
    return statistics.median(times) * 1e3, max(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--draft", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--rules", nargs="+", default=list(RULES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/bench/samplers.csv"))
    args = parser.parse_args()

    torch.set_grad_enabled(False)
    rows = []
    grid = [(b, m, r) for b in args.batch for m in args.draft for r in args.rules]
    inputs_key, inputs = None, None
    for batch, m, rule_name in tqdm(grid, desc="samplers bench"):
        if inputs_key != (batch, m):
            inputs, inputs_key = None, (batch, m)
            inputs = _inputs(batch, m, args.vocab)
        ids, p, q = inputs
        rule = make_sampler(rule_name, **RULES[rule_name])
        gen = torch.Generator().manual_seed(0)
        rule.verify(ids, p, q, generator=gen)  # warm-up
        fast_ms, fast_mib = _time(partial(rule.verify, ids, p, q, generator=gen), args.repeats)
        naive_ms, naive_mib = _time(
            partial(naive_verify, rule, ids, p, q, generator=gen), args.repeats
        )
        for impl, ms, mib in (("fast", fast_ms, fast_mib), ("naive", naive_ms, naive_mib)):
            rows.append(
                {
                    "rule": rule_name,
                    "impl": impl,
                    "B": batch,
                    "m": m,
                    "V": args.vocab,
                    "median_ms": round(ms, 3),
                    "peak_extra_mib": round(mib, 1),
                    "speedup_vs_naive": round(naive_ms / fast_ms, 2) if impl == "fast" else "",
                    "threads": torch.get_num_threads(),
                }
            )

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(
        f"{'rule':<13}{'B':>4}{'m':>4}{'fast ms':>10}{'naive ms':>10}{'x':>7}"
        f"{'fast MiB':>10}{'naive MiB':>11}"
    )
    for fast, naive in zip(rows[::2], rows[1::2], strict=True):
        print(
            f"{fast['rule']:<13}{fast['B']:>4}{fast['m']:>4}{fast['median_ms']:>10.2f}"
            f"{naive['median_ms']:>10.2f}{fast['speedup_vs_naive']:>7.2f}"
            f"{fast['peak_extra_mib']:>10.1f}{naive['peak_extra_mib']:>11.1f}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
