"""The acceptance rules' names and hyper-parameters, free of torch: what a config may say.

Configuration checks read this before anything heavy is imported, so a bad command line fails in
milliseconds. Each rule class in this package takes exactly the parameters listed here (a test
checks that every `make_sampler` rule's `__init__` and `params()` agree with its entry). The
rules that verify against a target pi declare their entry in their own file under
`samplers/rules/` (collected here), so adding one is that file plus its YAML (docs/rules.md).

A parameter's CSV column is its own name unless `column` says otherwise (`k` would clash with
nothing but reads badly next to the sampling top-k, so it is `top_k_accept`). Parameters without
a column of their own still reach every results row through the `sampler_params` JSON column.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cactus_bench.samplers.params import DELTA, DIVERGENCE_NAMES, Param, RuleInfo, did_you_mean
from cactus_bench.samplers.rules import BUILDERS

VERIFIER_ONLY = "verifier"  # the run configuration's "no speculation" choice (not a rule)
_did_you_mean = did_you_mean  # the name the run's error messages import


RULES: dict[str, RuleInfo] = {
    rule.name: rule
    for rule in (
        RuleInfo("sps", "standard speculative sampling: lossless, target h = q"),
        RuleInfo("cactus", "Cactus, the paper's Taylor step (Corollary 5)", (DELTA,)),
        RuleInfo(
            "cactus_exact",
            "Cactus with the exact root of Theorem 2 for an f-divergence",
            (DELTA, Param("divergence", str, "f-divergence", choices=DIVERGENCE_NAMES)),
        ),
        RuleInfo(
            "tas",
            "typical acceptance (Medusa; vLLM V0): q(n) > min(threshold, alpha exp(-H(q)))",
            (
                Param("threshold", float, "TAS epsilon", low=0.0, low_open=True, high=1.0),
                Param("alpha", float, "TAS alpha", low=0.0, low_open=True),
            ),
        ),
        RuleInfo(
            "interp",
            "verify against alpha p + (1 - alpha) q",
            (Param("alpha", float, "interpolation weight on the drafter", low=0.0, high=1.0),),
        ),
        RuleInfo(
            "topk",
            "accept iff q(n) is within q's top k",
            (Param("k", int, "top-k acceptance", low=1, column="top_k_accept"),),
        ),
        RuleInfo("greedy", "accept iff n = argmax q (temperature 0)"),
        # The rules that verify against a target pi (samplers/rules/, one file each).
        *(builder.info for builder in BUILDERS),
        RuleInfo(
            "ensemble",
            "HF assistant_ensemble_weight / DIVERSED static: verify against w q + (1 - w) p",
            (Param("w", float, "ensemble weight on the verifier (1 = SpS)", low=0.0, high=1.0),),
            alias_of="interp",
            # interp's h = alpha p + (1 - alpha) q is the same rule with alpha = 1 - w; rounded
            # so that w = 0.7 names the run alpha = 0.3, not 0.30000000000000004.
            to_target=lambda params: {"alpha": round(1.0 - params["w"], 12)} if params else {},
        ),
    )
}
RULE_NAMES: tuple[str, ...] = tuple(RULES)
# Every CSV column a rule parameter owns, in catalogue order (delta, divergence, threshold, ...).
PARAM_COLUMNS: tuple[str, ...] = tuple(
    dict.fromkeys(p.csv_column for rule in RULES.values() for p in rule.params if p.csv_column)
)


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
    info = rule_info(name)
    takes = ", ".join(p.name for p in info.params) or "no parameters"
    checked = {}
    for key, value in params.items():
        param = info.param(key)
        if param is None:
            known = [p.name for p in info.params]
            raise ValueError(
                f"sampler {name!r} does not take {key}{did_you_mean(key, known)} "
                f"(it takes {takes}); remove sampler.{key}"
            )
        checked[key] = param.coerce(name, value)
    return checked


def param_columns(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The CSV columns of a rule's parameters: {column: value}, every PARAM_COLUMNS key set."""
    info = rule_info(name) if name in RULES else RuleInfo(name, "")
    columns: dict[str, Any] = dict.fromkeys(PARAM_COLUMNS)
    for key, value in params.items():
        param = info.param(key)
        if param is not None and param.csv_column in columns:
            columns[param.csv_column] = value
    return columns
