"""`make_sampler`: a rule by name, its parameters checked against the catalogue first."""

from __future__ import annotations

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.catalogue import RULE_NAMES, check_params, rule_info
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
assert tuple(SAMPLERS) == RULE_NAMES, "catalogue.RULES and SAMPLERS must list the same rules"


def make_sampler(name: str, **params) -> AcceptanceRule:
    """Builds a rule by name. Parameters set to None are left at the rule's default; unknown
    names and out-of-range values raise one line (the catalogue's checks)."""
    rule_info(name)
    given = check_params(name, {key: value for key, value in params.items() if value is not None})
    return SAMPLERS[name](**given)
