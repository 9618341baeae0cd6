"""Export the committed SmolLM2 drafter as a plain Llama folder vLLM loads (full-vocabulary head).

    python scripts/export_vllm_drafter.py          # -> <cache>/smollm2-135m-drafter-vllm
    python scripts/export_vllm_drafter.py --force  # re-export even when the weights are unchanged

Re-exports whatever drafter is committed in cactus_bench/models/assets/ (cactus_bench.vllm.export
says how its law differs from the HF engine's 8192-id head). Output goes to the cache, never
into the repository.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cactus_bench.vllm.export import export_dir, export_full_vocab_drafter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help=f"default: {export_dir()}")
    parser.add_argument("--force", action="store_true", help="re-export even if up to date")
    args = parser.parse_args()
    path = export_full_vocab_drafter(args.out, force=args.force)
    print(f"exported drafter: {path}")


if __name__ == "__main__":
    main()
