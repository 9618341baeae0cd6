"""Model pairs: loaders for real drafter/verifier pairs and the tiny in-memory pair (tiny.py).

from cactus_bench.models import PairSpec, load_pair, PAIR_NAMES
pair = load_pair("smollm2_135m", device="cpu")  # or a PairSpec; -> LoadedPair
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cactus_bench.models.registry import PAIR_NAMES, PAIRS, PairSpec, get_pair_spec

if TYPE_CHECKING:
    from cactus_bench.models.loading import LoadedPair, load_pair
    from cactus_bench.models.tiny import make_tiny_pair, make_tiny_tokenizer
    from cactus_bench.models.token_map import shared_token_ids

_LAZY = {
    **dict.fromkeys(("LoadedPair", "load_pair"), "loading"),
    **dict.fromkeys(("make_tiny_pair", "make_tiny_tokenizer"), "tiny"),
    "shared_token_ids": "token_map",
}


def __getattr__(name: str) -> Any:
    """Loaders import torch and transformers on first use; the registry stays light."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"cactus_bench.models.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'cactus_bench.models' has no attribute {name!r}")


__all__ = [
    "PAIRS",
    "PAIR_NAMES",
    "LoadedPair",
    "PairSpec",
    "get_pair_spec",
    "load_pair",
    "make_tiny_pair",
    "make_tiny_tokenizer",
    "shared_token_ids",
]
