"""Rules by name: `build_rule` builds one from its typed parameters (`RuleParams`), the only
builder; `make_sampler` (the Python API) parses a name and keyword parameters into them first.

The classes are collected from the modules that declare them (`target_rules.RULES`,
`heuristic_rules.RULES`, `rules.BUILDERS`), each under its entry's name (samplers/declared.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cactus_bench.samplers import heuristic_rules, target_rules
from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.catalogue import RULE_NAMES, RULES, rule_info
from cactus_bench.samplers.guards import Guards
from cactus_bench.samplers.kernel import PlanRule
from cactus_bench.samplers.params import RuleParams
from cactus_bench.samplers.rules import BUILDERS


def _plan_rule(builder: type) -> Callable[..., AcceptanceRule]:
    def make(**params) -> AcceptanceRule:
        rule = PlanRule(builder(**params))
        rule.verifies_target = RULES[builder.info.name].target_family
        return rule

    make.builder = builder  # the signature the catalogue test reads
    return make


def _alias(name: str) -> Callable[..., AcceptanceRule]:
    def make(**params) -> AcceptanceRule:  # the rule it names, with that rule's parameters
        return make_sampler(name, **params)

    return make


# The class of each rule that has one (an alias has none): what fills a parameter left unset
_CLASSES: dict[str, type] = {
    cls.info.name: cls for cls in (*target_rules.RULES, *heuristic_rules.RULES, *BUILDERS)
}
_MAKERS: dict[str, Callable[..., AcceptanceRule]] = {
    **{cls.info.name: cls for cls in (*target_rules.RULES, *heuristic_rules.RULES)},
    **{builder.info.name: _plan_rule(builder) for builder in BUILDERS},
    **{name: _alias(name) for name, info in RULES.items() if info.alias_of},
}
assert set(_MAKERS) == set(RULE_NAMES), "the catalogue's rules and their classes must match"
SAMPLERS: dict[str, Callable[..., AcceptanceRule]] = {name: _MAKERS[name] for name in RULE_NAMES}


def build_rule(params: RuleParams) -> AcceptanceRule:
    """The acceptance rule typed, checked parameters describe (`RuleInfo.parse` made them: a
    run's config checks, `make_sampler`, the vLLM workers from RULE_ENV's JSON), its guards set
    (the engine gives it the stop ids). An alias (ensemble) builds the rule it names (interp)."""
    info = params.info
    if info.alias_of:
        target = {**info.to_target(params.values()), **params.guards_set()}
        return build_rule(RULES[info.alias_of].parse(target))
    rule = _MAKERS[params.rule](**params.values())
    guards = params.guards_set()
    return rule.with_guards(Guards(**guards)) if guards else rule


def params_with_defaults(name: str, **params: Any) -> RuleParams:
    """Rule `name`'s typed parameters from keyword values: those absent or None at the rule's
    defaults, as its class sets them (tas: alpha = sqrt(threshold)). Unknown names and values
    out of range raise one line (the catalogue's checks), a guard on a rule outside the target
    family too. An alias with its parameters unset is the rule it names at that rule's."""
    info = rule_info(name)
    given = {key: value for key, value in params.items() if value is not None}
    own, guards = info.split_guards(given)
    if all(param.name in own for param in info.params):
        return info.parse(given)
    if info.alias_of:
        return params_with_defaults(info.alias_of, **info.to_target(own), **guards)
    defaults = _CLASSES[name](**info.check(own)).params()  # the class fills what is unset
    return info.parse({**defaults, **given})


def make_sampler(name: str, **params: Any) -> AcceptanceRule:
    """Builds a rule by name (`params_with_defaults`, then `build_rule`). The guards (stop,
    strict_first, relax_in, near_top) are taken too, refused in one line for a rule outside
    the target family."""
    return build_rule(params_with_defaults(name, **params))
