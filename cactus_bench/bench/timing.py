"""CPU time of repeated calls, and its spread: what the micro-benchmarks report.

CPU time (this thread's by default) is less disturbed than wall time by other jobs on a shared
machine; a spread is the median with the 25th and 75th percentiles.
"""

from __future__ import annotations

import statistics
import time


def cpu_times_ms(call, repeats: int, clock=time.thread_time) -> list[float]:
    """CPU ms of each of `repeats` calls of `call()`, by `clock` (this thread's time by default;
    time.process_time where a library may run the work on threads of its own)."""
    samples = []
    for _ in range(repeats):
        start = clock()
        call()
        samples.append(1e3 * (clock() - start))
    return samples


def spread(samples: list[float]) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) of `samples` (at least two)."""
    quartiles = statistics.quantiles(samples, n=4)
    return statistics.median(samples), quartiles[0], quartiles[2]


def spread_ms(call, repeats: int) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) CPU ms of `call()` over `repeats` calls after a warm-up."""
    for _ in range(max(3, repeats // 10)):
        call()
    return spread(cpu_times_ms(call, repeats))
