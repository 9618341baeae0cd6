"""The acceptance rules' names and hyper-parameters, free of torch: what a config may say.

Configuration checks read this before anything heavy is imported, so a bad command line fails in
milliseconds. Each rule class in this package takes exactly the parameters listed here (a test
checks that every `make_sampler` rule's `__init__` and `params()` agree with its entry). To add
a rule or a parameter: write the rule, list it here, add its YAML (README, "Acceptance rules").

A parameter's CSV column is its own name unless `column` says otherwise (`k` would clash with
nothing but reads badly next to the sampling top-k, so it is `top_k_accept`). Parameters without
a column of their own still reach every results row through the `sampler_params` JSON column.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DIVERGENCE_NAMES = ("kl", "reverse_kl", "chi2", "hellinger", "tv")
VERIFIER_ONLY = "verifier"  # the run configuration's "no speculation" choice (not a rule)


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: its type, its allowed range or choices, and what it means."""

    name: str
    kind: type  # float | int | str
    doc: str
    low: float | None = None  # inclusive unless low_open
    high: float | None = None  # inclusive
    low_open: bool = False
    choices: tuple[str, ...] = ()
    column: str | None = None  # CSV column, when not `name`

    @property
    def csv_column(self) -> str:
        return self.column or self.name

    def coerce(self, rule: str, value: Any) -> Any:
        """`value` as this parameter's type, or a one-line ValueError naming the fix."""
        if self.kind is str:
            if value not in self.choices:
                hint = _did_you_mean(value, self.choices)
                raise ValueError(
                    f"{self.name} must be one of {', '.join(self.choices)} for {rule}{hint}; "
                    f"got {value!r}"
                )
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{self.name} must be a number for {rule} ({self.doc}); got {value!r}")
        if self.kind is int:
            if int(value) != value:
                raise ValueError(f"{self.name} must be an integer for {rule}; got {value!r}")
            value = int(value)
        else:
            value = float(value)
        if value != value:  # NaN
            raise ValueError(f"{self.name} must be a number for {rule}; got NaN")
        too_low = self.low is not None and (
            value <= self.low if self.low_open else value < self.low
        )
        too_high = self.high is not None and value > self.high
        if too_low or too_high:
            raise ValueError(
                f"{self.name} must be {self.range_text()} for {rule} ({self.doc}); got {value}"
            )
        return value

    def range_text(self) -> str:
        """`in (0, 1]` for two bounds, `>= 0` or `> 0` for a lower bound alone."""
        if self.high is None and self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf)" if self.high is None else f"{self.high:g}]"
        return f"in {'(' if self.low_open or self.low is None else '['}{low}, {high}"


@dataclass(frozen=True)
class RuleInfo:
    name: str
    summary: str
    params: tuple[Param, ...] = ()

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


DELTA = Param("delta", float, "divergence budget in nats, the paper's delta", low=0.0)
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
    )
}
RULE_NAMES: tuple[str, ...] = tuple(RULES)
# Every CSV column a rule parameter owns, in catalogue order (delta, divergence, threshold, ...).
PARAM_COLUMNS: tuple[str, ...] = tuple(
    dict.fromkeys(p.csv_column for rule in RULES.values() for p in rule.params)
)


def rule_info(name: str) -> RuleInfo:
    """The catalogue entry of `name`, or a one-line ValueError listing the rules."""
    if name not in RULES:
        raise ValueError(
            f"unknown sampler {name!r}{_did_you_mean(name, RULE_NAMES)}; "
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
                f"sampler {name!r} does not take {key}{_did_you_mean(key, known)} "
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


def _did_you_mean(word: Any, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
