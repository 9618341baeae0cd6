"""A rule's hyper-parameters and catalogue entry, free of torch (the rule files import these).

`Param` types and range-checks one value and names its CSV column; `RuleInfo` is one rule's
catalogue entry. Both live here rather than in `catalogue.py` because the rule files under
`samplers/rules/` declare their own entries and `catalogue.py` collects them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DIVERGENCE_NAMES = ("kl", "reverse_kl", "chi2", "hellinger", "tv")


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: its type, its allowed range or choices, and what it means."""

    name: str
    kind: type  # float | int | str
    doc: str
    low: float | None = None  # inclusive unless low_open
    high: float | None = None  # inclusive
    low_open: bool = False
    choices: tuple[str, ...] = ()  # str: the values allowed; int/float: named values besides
    column: str | None = None  # CSV column, when not `name`; "" for none (sampler_params only)

    @property
    def csv_column(self) -> str | None:
        return self.name if self.column is None else self.column or None

    def coerce(self, rule: str, value: Any) -> Any:
        """`value` as this parameter's type, or a one-line ValueError naming the fix."""
        if self.kind is str:
            if value not in self.choices:
                hint = did_you_mean(value, self.choices)
                raise ValueError(
                    f"{self.name} must be one of {', '.join(self.choices)} for {rule}{hint}; "
                    f"got {value!r}"
                )
            return value
        if isinstance(value, str) and value in self.choices:  # a named value (FLy's window auto)
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            named = "".join(f" or {choice!r}" for choice in self.choices)
            raise ValueError(
                f"{self.name} must be a number{named} for {rule} ({self.doc}); got {value!r}"
            )
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
    """One rule: its name, one line on what it does, its parameters. An alias (`alias_of`) is
    another name for a rule: `to_target` maps the alias's parameters to the rule's."""

    name: str
    summary: str
    params: tuple[Param, ...] = ()
    alias_of: str | None = None
    to_target: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    # False for a rule whose decision at one position reads later drafts (FLy's window): it
    # has no emitted law of one position's p and q, so the frontier's exact statistics skip it
    per_position_law: bool = True

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


DELTA = Param("delta", float, "divergence budget in nats, the paper's delta", low=0.0)
# The law a rule's deferral or divergence test reads. The sources read the models' temperature-1
# laws without top-k / top-p (SpecCascades' "unscaled" confidences, FSD's unprocessed logits);
# "processed" reads the sampling laws p, q themselves (FSD's `*_processed` types).
TEST_LAW = Param(
    "test_law",
    str,
    "the law the test reads: unscaled (temperature 1, untruncated) or processed (p, q)",
    choices=("unscaled", "processed"),
)


def did_you_mean(word: Any, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
