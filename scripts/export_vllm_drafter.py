"""Export the committed SmolLM2 drafter as a folder vLLM loads, with its 8192-id subset head.

    python scripts/export_vllm_drafter.py          # -> <cache>/smollm2-135m-drafter-vllm
    python scripts/export_vllm_drafter.py --force  # re-export even when the weights are unchanged

Re-exports whatever drafter is committed in cactus_bench/models/assets/ (cactus_bench.vllm.export
says how the folder carries the HF engine's law). Output goes to the cache, never into the
repository.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cactus_bench.vllm.export import export_dir, export_vllm_drafter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"default: {export_dir()}")
    parser.add_argument("--force", action="store_true", help="re-export even if up to date")
    args = parser.parse_args()
    path = export_vllm_drafter(args.out, force=args.force)
    print(f"exported drafter: {path}")


if __name__ == "__main__":
    main()
