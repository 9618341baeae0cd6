"""make bench: aten ops and stalls per forward, rule `verify` and engine step (CPU proxies of a
GPU's launch and synchronisation costs) -> results/bench/step_ops.csv.

    python scripts/bench_step_ops.py [--out results/bench/step_ops.csv]

Counted on the tiny pair with a TorchDispatchMode (cactus_bench/bench/step_ops.py says what each
row counts). Counts are exact and machine-independent for a given torch: no spread to report.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/step_ops.csv")
    parser.add_argument("--m", type=int, default=3, help="drafts of the forward/verify rows")
    parser.add_argument("--step-m", type=int, nargs="+", default=[3, 10], help="drafts of steps")
    args = parser.parse_args()

    import torch

    from cactus_bench.bench.step_ops import forward_counts, step_counts, verify_counts
    from cactus_bench.models.tiny import make_tiny_pair
    from cactus_bench.samplers.catalogue import RULES

    torch.set_num_threads(1)
    drafter, verifier, tokenizer = make_tiny_pair(seed=0)
    rows = []
    for batch in (1, 8):
        rows += forward_counts(verifier, batch, 1) + forward_counts(verifier, batch, args.m + 1)
    for batch in (1, 8):
        rows += verify_counts(list(RULES), batch, args.m)
    for arm in ("verifier", "sps", "cactus"):
        for m in args.step_m if arm != "verifier" else args.step_m[:1]:
            for batch in (1, 8):
                rows.append(step_counts(drafter, verifier, tokenizer, arm, batch, m))
    columns = list(dict.fromkeys(key for row in rows for key in row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    worst = max(r["stalls"] for r in rows if r["kind"] == "step")
    print(f"step_ops: {len(rows)} rows -> {args.out}; most stalls in a decode step: {worst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
