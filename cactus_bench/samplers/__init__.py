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

import inspect

from cactus_bench.samplers.base import AcceptanceRule, DraftStats, VerifyOutput
from cactus_bench.samplers.divergences import (
    DIVERGENCES,
    binary_divergence,
    exact_gamma,
    full_divergence,
    taylor_gamma,
)
from cactus_bench.samplers.heuristic_rules import Greedy, TopK, TypicalAcceptance
from cactus_bench.samplers.target_rules import Cactus, CactusExact, Interpolation, SpS

SAMPLERS: dict[str, type[AcceptanceRule]] = {
    "sps": SpS,
    "cactus": Cactus,
    "cactus_exact": CactusExact,
    "tas": TypicalAcceptance,
    "interp": Interpolation,
    "topk": TopK,
    "greedy": Greedy,
}
SAMPLER_NAMES = tuple(SAMPLERS)


def make_sampler(name: str, **params) -> AcceptanceRule:
    """Builds a rule by name. Parameters set to None are ignored; unknown ones raise."""
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLER_NAMES)}")
    cls = SAMPLERS[name]
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    given = {key: value for key, value in params.items() if value is not None}
    unknown = sorted(set(given) - accepted)
    if unknown:
        takes = ", ".join(sorted(accepted)) or "no parameters"
        raise ValueError(f"sampler {name!r} takes {takes}; got unexpected {', '.join(unknown)}")
    return cls(**given)


__all__ = [
    "DIVERGENCES",
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
