"""Model pairs: loaders for real drafter/verifier pairs and the tiny in-memory pair (tiny.py).

from cactus_bench.models import PairSpec, load_pair, PAIR_NAMES
pair = load_pair("smollm2_135m", device="cpu")  # or a PairSpec; -> LoadedPair
"""

from cactus_bench.models.loading import LoadedPair, load_pair, shared_token_ids
from cactus_bench.models.registry import PAIR_NAMES, PAIRS, PairSpec, get_pair_spec
from cactus_bench.models.tiny import make_tiny_pair, make_tiny_tokenizer

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
