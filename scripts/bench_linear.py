"""Linear-layer benchmark: SmolLM2-135M's matrix shapes over 1..8 rows, per dtype and kernel.

    python scripts/bench_linear.py                  # prints the table (ms, medians)
    python scripts/bench_forward.py                 # also runs it, as its section `linear`

What is timed and why: cactus_bench/bench/linear.py.
"""

from __future__ import annotations

import argparse

import torch

from cactus_bench.bench.linear import bench_linear, print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--max-rows", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = range(1, args.max_rows + 1)
    results, _ = bench_linear(rows, args.repeats)
    print_table(results, rows)


if __name__ == "__main__":
    main()
