"""Acceptance rules for speculative sampling as pure tensor functions (no model, no I/O).

    from cactus_bench.samplers import make_sampler
    s = make_sampler("cactus", delta=0.75)
    out = s.verify(draft_token_ids, draft_probs, target_probs, generator=None)
    law = s.output_distribution(p, q)

Shapes: draft_token_ids [B, m], draft_probs [B, m, V], target_probs [B, m + 1, V] (row m is the
bonus row); out.token_ids [B, m + 1] (accepted drafts, one recovered/bonus token, then -1),
out.num_accepted [B].
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cactus_bench.samplers.catalogue import RULE_NAMES, RULES, VERIFIER_ONLY, check_params

SAMPLER_NAMES = RULE_NAMES  # torch-free: configuration checks read the catalogue only

if TYPE_CHECKING:
    from cactus_bench.samplers.base import AcceptanceRule, VerifyOutput
    from cactus_bench.samplers.divergences import (
        DIVERGENCES,
        binary_divergence,
        exact_gamma,
        full_divergence,
        taylor_gamma,
    )
    from cactus_bench.samplers.heuristic_rules import Greedy, TopK, TypicalAcceptance
    from cactus_bench.samplers.registry import SAMPLERS, build_rule, make_sampler
    from cactus_bench.samplers.target_rules import Cactus, CactusExact, Interpolation, SpS
    from cactus_bench.samplers.verify_inputs import DraftStats

_LAZY = {
    **dict.fromkeys(("AcceptanceRule", "VerifyOutput"), "base"),
    "DraftStats": "verify_inputs",
    **dict.fromkeys(
        ("DIVERGENCES", "binary_divergence", "exact_gamma", "full_divergence", "taylor_gamma"),
        "divergences",
    ),
    **dict.fromkeys(("Greedy", "TopK", "TypicalAcceptance"), "heuristic_rules"),
    **dict.fromkeys(("Cactus", "CactusExact", "Interpolation", "SpS"), "target_rules"),
    **dict.fromkeys(("SAMPLERS", "build_rule", "make_sampler"), "registry"),
}


def __getattr__(name: str) -> Any:
    """The torch-backed names load on first use, so `import cactus_bench.samplers` stays light."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"cactus_bench.samplers.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'cactus_bench.samplers' has no attribute {name!r}")


__all__ = [
    "DIVERGENCES",
    "RULES",
    "RULE_NAMES",
    "VERIFIER_ONLY",
    "build_rule",
    "check_params",
    "SAMPLERS",
    "SAMPLER_NAMES",
    "AcceptanceRule",
    "Cactus",
    "CactusExact",
    "DraftStats",
    "Greedy",
    "Interpolation",
    "SpS",
    "TopK",
    "TypicalAcceptance",
    "VerifyOutput",
    "binary_divergence",
    "exact_gamma",
    "full_divergence",
    "make_sampler",
    "taylor_gamma",
]
