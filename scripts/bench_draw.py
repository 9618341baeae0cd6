"""Per-draft costs outside the decoder layers: the token draw and the drafter's subset head.

    python scripts/bench_draw.py            # SmolLM2-135M's drafter if cached, else the tiny pair

What is timed and why: cactus_bench/bench/draw.py. Medians and interquartile ranges of --repeats
calls, CPU ms; `bench_forward.py` records them as its "draw" section.
"""

from __future__ import annotations

import argparse

import torch

from cactus_bench.bench.draw import bench_draw
from cactus_bench.bench.models import DTYPES, load_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    drafters = {name: load_models("auto", dtype)[1] for name, dtype in DTYPES.items()}
    for (part, dtype, way), (median, q25, q75) in bench_draw(drafters, args.repeats).items():
        print(f"{part:5s} {dtype:9s} {way:18s} {median:7.3f} ms  (IQR {q25:.3f}-{q75:.3f})")


if __name__ == "__main__":
    main()
