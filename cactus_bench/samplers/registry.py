"""`make_sampler`: a rule by name, its parameters checked against the catalogue first;
`rule_from_checked`: the same from parameters the catalogue has checked already."""

from __future__ import annotations

from collections.abc import Callable

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.catalogue import RULE_NAMES, RULES, check_params, rule_info
from cactus_bench.samplers.guards import Guards
from cactus_bench.samplers.heuristic_rules import Greedy, TopK, TypicalAcceptance
from cactus_bench.samplers.kernel import PlanRule
from cactus_bench.samplers.params import GUARD_DEFAULTS, RuleParams
from cactus_bench.samplers.rules import BUILDERS
from cactus_bench.samplers.target_rules import Cactus, CactusExact, Interpolation, SpS


def _plan_rule(builder: type) -> Callable[..., AcceptanceRule]:
    def make(**params) -> AcceptanceRule:
        rule = PlanRule(builder(**params))
        rule.verifies_target = RULES[builder.info.name].target_family
        return rule

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
    builds the rule it names (interp). The guards (stop, strict_first, relax_in, near_top) are
    taken too, refused in one line for a rule outside the target family."""
    info = rule_info(name)
    given = {key: value for key, value in params.items() if value is not None}
    guards = info.split_guards(given)[1]
    rule = SAMPLERS[name](**check_params(name, given))
    return rule.with_guards(Guards(**guards)) if guards else rule


def build_rule(params: RuleParams) -> AcceptanceRule:
    """The acceptance rule a run's checked, typed parameters describe (`RuleInfo.parse` made
    them once, before anything loaded), its guards set (the engine gives it the stop ids)."""
    rule = SAMPLERS[params.rule](**params.values())
    guards = params.guards_set()
    return rule.with_guards(Guards(**guards)) if guards else rule


def rule_from_checked(name: str, params: dict) -> AcceptanceRule:
    """Builds a rule from parameters `check_params` has already returned (a run's config checks
    did, before anything loaded): the run path checks each parameter once. Guards among them
    are set on the rule (the vLLM bridge's near_top)."""
    guards = {key: params[key] for key in GUARD_DEFAULTS if key in params}
    rule = SAMPLERS[name](**{key: v for key, v in params.items() if key not in guards})
    return rule.with_guards(Guards(**guards)) if guards else rule
