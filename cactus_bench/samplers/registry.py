"""`make_sampler`: a rule by name, its parameters checked against the catalogue first;
`rule_from_checked`: the same from parameters the catalogue has checked already."""

from __future__ import annotations

from collections.abc import Callable

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.catalogue import RULE_NAMES, RULES, check_params, rule_info
from cactus_bench.samplers.heuristic_rules import Greedy, TopK, TypicalAcceptance
from cactus_bench.samplers.kernel import PlanRule
from cactus_bench.samplers.params import RuleParams
from cactus_bench.samplers.rules import BUILDERS
from cactus_bench.samplers.target_rules import Cactus, CactusExact, Interpolation, SpS


def _plan_rule(builder: type) -> Callable[..., AcceptanceRule]:
    def make(**params) -> AcceptanceRule:
        return PlanRule(builder(**params))

    make.builder = builder  # the signature the catalogue test reads
    return make


def _alias(name: str) -> Callable[..., AcceptanceRule]:
    info = RULES[name]

    def make(**params) -> AcceptanceRule:
        return make_sampler(info.alias_of, **info.to_target(params))

    return make


SAMPLERS: dict[str, Callable[..., AcceptanceRule]] = {
    "sps": SpS,
    "cactus": Cactus,
    "cactus_exact": CactusExact,
    "tas": TypicalAcceptance,
    "interp": Interpolation,
    "topk": TopK,
    "greedy": Greedy,
    **{builder.info.name: _plan_rule(builder) for builder in BUILDERS},
    **{name: _alias(name) for name, info in RULES.items() if info.alias_of},
}
assert tuple(SAMPLERS) == RULE_NAMES, "catalogue.RULES and SAMPLERS must list the same rules"


def make_sampler(name: str, **params) -> AcceptanceRule:
    """Builds a rule by name. Parameters set to None are left at the rule's default; unknown
    names and out-of-range values raise one line (the catalogue's checks). An alias (ensemble)
    builds the rule it names (interp)."""
    rule_info(name)
    given = check_params(name, {key: value for key, value in params.items() if value is not None})
    return SAMPLERS[name](**given)


def build_rule(params: RuleParams) -> AcceptanceRule:
    """The acceptance rule a run's checked, typed parameters describe (`RuleInfo.parse` made
    them once, before anything loaded)."""
    return SAMPLERS[params.rule](**params.values())


def rule_from_checked(name: str, params: dict) -> AcceptanceRule:
    """Builds a rule from parameters `check_params` has already returned (a run's config checks
    did, before anything loaded): the run path checks each parameter once."""
    return SAMPLERS[name](**params)
