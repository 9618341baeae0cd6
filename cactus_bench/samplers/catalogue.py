"""The acceptance rules' names and hyper-parameters, free of torch: what a config may say.

Configuration checks read this before anything heavy is imported, so a bad command line fails in
milliseconds. Each rule declares its entry once, beside its class (`info`): a builder in its
own file under `samplers/rules/`, so adding one is that file plus its YAML (docs/rules.md); the
rules whose classes load torch (`target_rules.py`, `heuristic_rules.py`) in
`samplers/declared.py`. This module collects them (a test checks that every rule's `__init__`
and `params()` agree with its entry).

A run parses its sampler node once into the rule's `RuleParams` (`parse_sampler`), builds the
rule from it and records it. A parameter's CSV column is its own name unless `column` says
otherwise (`k` would clash with nothing but reads badly next to the sampling top-k, so it is
`top_k_accept`); `PARAM_COLUMN_DOCS` orders and documents those columns, and the results schema
takes them from here. Parameters without a column of their own still reach every results row
through the `sampler_params` JSON column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from cactus_bench.samplers.declared import HOOK_RULES
from cactus_bench.samplers.params import GUARDS, Param, RuleInfo, RuleParams, did_you_mean
from cactus_bench.samplers.rules import BUILDERS

VERIFIER_ONLY = "verifier"  # the run configuration's "no speculation" choice (not a rule)
# The verifier alone's parameters: none, and no rule to build
NO_RULE: RuleParams = RuleInfo(VERIFIER_ONLY, "the verifier alone: no drafts").params_type()


# The rules that verify against a target pi: accept min(1, pi / p), resample norm((pi - p)+),
# with pi fixed by the position (Cactus: by the drafted token too). The guards compose with
# these (docs/rules.md, Guards); tests/test_samplers_guards.py checks the plan rules' (a, r)
# has that form (r > 0 only where a = 1). Outside: the threshold and accept-set rules (tas,
# topk, greedy, bild, greedy_margin), fuzzy SD as released (r = q) and FLy (a window).
TARGET_FAMILY = frozenset(
    {
        "sps",
        "cactus",
        "cactus_exact",
        "interp",
        "ensemble",
        "mentored",
        "lenience",
        "chow",
        "diff",
        "opt",
        "tokenv1",
        "tokenv2",
        "tokenv3",
        "fsd_reducible",
        "topband",
        "topband_cascade",
        "additive",
    }
)


def _flagged(info: RuleInfo) -> RuleInfo:
    return dataclasses.replace(info, target_family=info.name in TARGET_FAMILY)


# The alias: another name for a rule, with its own parameters mapped to the rule's.
ENSEMBLE = RuleInfo(
    "ensemble",
    "HF assistant_ensemble_weight / DIVERSED static: verify against w q + (1 - w) p",
    (Param("w", float, "ensemble weight on the verifier (1 = SpS)", low=0.0, high=1.0),),
    alias_of="interp",
    # interp's h = alpha p + (1 - alpha) q is the same rule with alpha = 1 - w; rounded so
    # that w = 0.7 names the run alpha = 0.3, not 0.30000000000000004.
    to_target=lambda params: {"alpha": round(1.0 - params["w"], 12)} if params else {},
)
# In the catalogue's order: the hook rules, the builders (by file name), the alias.
RULES: dict[str, RuleInfo] = {
    rule.name: _flagged(rule)
    for rule in (*HOOK_RULES, *(builder.info for builder in BUILDERS), ENSEMBLE)
}
RULE_NAMES: tuple[str, ...] = tuple(RULES)

# Each rule parameter's CSV column, in the rows' column order (results files keep their columns'
# order, so a new one goes last), with its line in the results schema (docs/results-schema.md).
# One column may serve several rules (alpha: TAS, interp, a cascade), so its line names them.
PARAM_COLUMN_DOCS: dict[str, str] = {
    "delta": "divergence budget (cactus, cactus_exact, mentored)",
    "divergence": "f-divergence of the constraint, e.g. kl",
    "threshold": "TAS posterior threshold epsilon, FSD's T, or FLy's theta",
    "alpha": "TAS alpha, interp's drafter weight, a cascade's alpha",
    "top_k_accept": "k of the top-k acceptance baseline",
    "lenience_l": "Leviathan's lenience l (lenience; 1 = SpS)",
    "tau": "BiLD's rollback threshold tau_RB in nats (bild)",
    "fsd_div": "FSD's divergence: js | kl | reverse_kl | tv",
    "test_law": "unscaled | processed: law a cascade/FSD/BiLD test reads",
    "w": "ensemble weight on q (runs as interp, alpha = 1 - w)",
    "fly_window": "FLy's deferred window W (fly)",
    "beta": "topband_cascade's head band: q(n) >= (1 - beta) max q",
    "acceptance_threshold": "additive's t added to SpS's ratio q(n) / p(n) (vLLM #35355)",
    "margin": "greedy_margin's K: accept iff q(n) >= K max q",
    "stop": "guard: exact keeps q's stop mass (target-family rules; else empty)",
    "strict_first": "guard: SpS for an answer's first L tokens (0: off)",
    "relax_in": "guard: all | think (the rule inside <think> only)",
    "near_top": "guard: the rule only where q(n) >= c max q (0: off)",
}


# Each rule's parameter class is made at run time (`RuleInfo.params_type`); it lives here under its
# own name (`CactusParams`, ...) so that pickle (submitit's jobs) finds it by reference.
for _info in (*RULES.values(), NO_RULE.info):
    globals()[_info.params_type.__name__] = _info.params_type


def _column_kinds() -> dict[str, str]:
    """{column: "float" | "int" | "str"} from the parameters that own it; one line when a
    parameter's column has no line above, a line has no parameter, or two parameters give one
    column two types."""
    kinds: dict[str, str] = {}
    for rule in RULES.values():
        for param in rule.params + GUARDS:
            column = param.csv_column
            if column is None:
                continue
            if column not in PARAM_COLUMN_DOCS:
                raise ValueError(
                    f"{rule.name}'s parameter {param.name} writes column {column!r}, which "
                    "samplers/catalogue.py's PARAM_COLUMN_DOCS lacks: add its line there (last)"
                )
            if kinds.setdefault(column, param.kind.__name__) != param.kind.__name__:
                raise ValueError(f"column {column!r} holds two types; give {param.name} its own")
    unused = [column for column in PARAM_COLUMN_DOCS if column not in kinds]
    if unused:
        raise ValueError(f"PARAM_COLUMN_DOCS lists {unused}, which no rule parameter writes")
    return kinds


_KINDS = _column_kinds()
# (column, kind, doc) of every rule parameter's column, in order: the results schema's.
PARAM_COLUMN_SPECS: tuple[tuple[str, str, str], ...] = tuple(
    (column, _KINDS[column], doc) for column, doc in PARAM_COLUMN_DOCS.items()
)
PARAM_COLUMNS: tuple[str, ...] = tuple(column for column, _, _ in PARAM_COLUMN_SPECS)


def rule_info(name: str) -> RuleInfo:
    """The catalogue entry of `name`, or a one-line ValueError listing the rules."""
    if name not in RULES:
        raise ValueError(
            f"unknown sampler {name!r}{did_you_mean(name, RULE_NAMES)}; "
            f"choose one of {', '.join((*RULE_NAMES, VERIFIER_ONLY))}"
        )
    return RULES[name]


def check_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` typed and range-checked for rule `name`; unknown names raise one line."""
    return rule_info(name).check(params)


def parse_sampler(node: Mapping[str, Any]) -> RuleParams:
    """A config's sampler node `{name, **parameters}` as the rule's parameters, checked once;
    `NO_RULE` for the verifier alone. One-line ValueErrors name the fix."""
    node = dict(node)
    name = node.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ValueError("sampler.name is missing; pick one with sampler=<name> (e.g. cactus)")
    if name == VERIFIER_ONLY:
        if node:
            raise ValueError(f"sampler 'verifier' takes no parameters; remove {sorted(node)}")
        return NO_RULE
    return rule_info(name).parse(node)


def param_columns(rule_params: RuleParams) -> dict[str, Any]:
    """The row's rule parameter columns: {column: value}, every PARAM_COLUMNS key set. Read
    from the parameters the rule runs with, each under the column its own entry names (an
    alias's target parameters have none there: ensemble rows leave w and alpha empty)."""
    columns: dict[str, Any] = dict.fromkeys(PARAM_COLUMNS)
    for key, value in rule_params.runs_with().items():
        param = rule_params.info.param(key)
        if param is not None and param.csv_column in columns:
            columns[param.csv_column] = value
    columns.update(rule_params.guards())  # every guard, defaults included, in the family
    return columns
