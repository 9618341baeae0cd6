"""A rule's hyper-parameters and catalogue entry, free of torch (the rule files import these).

`Param` types and range-checks one value and names its CSV column; `RuleInfo` is one rule's
catalogue entry, and yields the frozen dataclass of the rule's parameters (`params_type`, a
`RuleParams`) that a run parses once from its config and builds its rule from. They live here
rather than in `catalogue.py` because the rule files under `samplers/rules/` declare their own
entries and `catalogue.py` collects them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

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

    @property
    def value_type(self) -> Any:
        """The field type in the rule's parameter dataclass: a number or one of its named values
        (FLy's `window: auto` until the run's m resolves it)."""
        return self.kind | str if self.choices and self.kind is not str else self.kind

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

    # Parameters resolved with the run's draft length m once the config is checked (FLy's
    # `window: auto` becomes min(6, m - 1)); a one-line ValueError when m does not fit
    at_draft_length: Callable[[dict[str, Any], int], dict[str, Any]] | None = None
    # True for a rule that verifies against a target pi (accept min(1, pi / p), resample
    # norm((pi - p)+)): the guards of GUARDS compose with it; the catalogue sets it
    target_family: bool = False

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def check(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` typed and range-checked (any subset of the parameters: the Python API leaves
        the rest at the rule's defaults); an unknown name raises one line."""
        values = self.split_guards(values)[0]
        self._refuse_unknown(values)
        return {key: self.param(key).coerce(self.name, value) for key, value in values.items()}

    def parse(self, node: Mapping[str, Any]) -> RuleParams:
        """The rule's parameters from a config's sampler node (without `name`; None = unset):
        unknown and missing names raise one line here, a value out of range in the dataclass
        (`RuleParams.__post_init__`), before anything heavy loads."""
        given = {key: value for key, value in node.items() if value is not None}
        given, guards = self.split_guards(given)
        self._refuse_unknown(given)
        missing = [p.name for p in self.params if p.name not in given]
        if missing:
            raise ValueError(
                f"sampler {self.name!r} needs {', '.join('sampler.' + m for m in missing)}; set "
                f"it in configs/sampler/{self.name}.yaml or on the command line"
            )
        return self.params_type(**given, **guards)

    def split_guards(self, values: Mapping[str, Any]) -> tuple[dict, dict]:
        """(the rule's own values, the guards set away from their defaults), each guard typed;
        a guard set on a rule outside the target family raises one line naming the fix."""
        own = {key: value for key, value in values.items() if key not in GUARD_DEFAULTS}
        guards = {}
        for param in GUARDS:
            if param.name not in values:
                continue
            value = param.coerce(self.name, values[param.name])
            if value == GUARD_DEFAULTS[param.name]:
                continue
            if not self.target_family:
                raise ValueError(
                    f"{param.name}={value} needs a rule that verifies against a target pi "
                    f"(sps, cactus, mentored, a cascade, ...); sampler {self.name!r} does not: "
                    f"remove sampler.{param.name} or pick such a rule"
                )
            guards[param.name] = value
        return own, guards

    def _refuse_unknown(self, values: Mapping[str, Any]) -> None:
        known = [p.name for p in self.params]
        for key in values:
            if key not in known:
                raise ValueError(
                    f"sampler {self.name!r} does not take {key}{did_you_mean(key, known)} "
                    f"(it takes {', '.join(known) or 'no parameters'}); remove sampler.{key}"
                )

    @cached_property
    def params_type(self) -> type[RuleParams]:
        """The frozen dataclass of this rule's parameters, one field per `Param` in order:
        `CactusParams(delta: float)`, `SpsParams()`."""
        title = "".join(part.title() for part in self.name.split("_"))
        guards = [
            (p.name, p.value_type, dataclasses.field(default=GUARD_DEFAULTS[p.name]))
            for p in (GUARDS if self.target_family else ())
        ]
        return dataclasses.make_dataclass(
            f"{title}Params",
            [(p.name, p.value_type) for p in self.params] + guards,
            bases=(RuleParams,),
            frozen=True,
            # catalogue.py publishes each class under its name, where pickle (submitit) finds it
            namespace={"info": self, "__module__": "cactus_bench.samplers.catalogue"},
        )


@dataclass(frozen=True)
class RuleParams:
    """One rule's checked parameters: the base of each `RuleInfo.params_type`. A run parses it
    once from its config (`RuleInfo.parse`), builds its rule from it (`registry.build_rule`) and
    records it (`runs_with`, and the columns `catalogue.param_columns` gives)."""

    info: ClassVar[RuleInfo]

    def __post_init__(self) -> None:
        # typed and range-checked as it is made: a value out of range raises one line
        for param in self.info.params + (GUARDS if self.info.target_family else ()):
            value = param.coerce(self.info.name, getattr(self, param.name))
            object.__setattr__(self, param.name, value)

    @property
    def rule(self) -> str:
        return self.info.name

    def values(self) -> dict[str, Any]:
        """{parameter: value} of the rule itself, in the catalogue's order (no guards)."""
        return {param.name: getattr(self, param.name) for param in self.info.params}

    def guards(self) -> dict[str, Any]:
        """{guard: value} of every guard (GUARDS), the defaults included; {} outside the
        target family, whose rules take none."""
        if not self.info.target_family:
            return {}
        return {param.name: getattr(self, param.name) for param in GUARDS}

    def guards_set(self) -> dict[str, Any]:
        """The guards set away from their defaults (what changes the run)."""
        return {k: v for k, v in self.guards().items() if v != GUARD_DEFAULTS[k]}

    def runs_with(self) -> dict[str, Any]:
        """The parameters of the rule that runs, as its `params()` gives them: an alias's are
        its target's (ensemble's w = 0.7 runs as interp's alpha = 0.3); then the guards set
        away from their defaults (so a run without guards keeps its hash)."""
        values = self.values()
        values = self.info.to_target(values) if self.info.alias_of else values
        return {**values, **self.guards_set()}

    def to_json(self) -> str:
        """These parameters as the sampler node `{"name", **values, **guards set}` in JSON
        (sorted keys): how they cross a process boundary (the vLLM workers' RULE_ENV), read
        back into equal parameters by `catalogue.parse_sampler` (floats round-trip exactly)."""
        node = {"name": self.rule, **self.values(), **self.guards_set()}
        return json.dumps(node, sort_keys=True)

    def at_draft_length(self, m: int) -> RuleParams:
        """These parameters with those that depend on the run's m resolved (`RuleInfo`)."""
        if self.info.at_draft_length is None:
            return self
        resolved = self.info.at_draft_length(self.values(), m)
        return self.info.params_type(**resolved, **self.guards())


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


# The guards: settings that compose with any rule of the target family (docs/rules.md, Guards).
# Each is a sampler key (`sampler.stop=exact`) and a top-level shortcut (`stop=exact`), and has
# its CSV column; a rule outside the family refuses one set away from its default.
GUARDS: tuple[Param, ...] = (
    Param(
        "stop",
        str,
        "exact: the emitted law keeps q's mass on the stop tokens (q on S, pi rescaled off S)",
        choices=("off", "exact"),
    ),
    Param("strict_first", int, "SpS for an answer's first L tokens (0: off)", low=0),
    Param(
        "relax_in",
        str,
        "think: the rule inside <think>...</think> only, SpS outside",
        choices=("all", "think"),
    ),
    Param(
        "near_top",
        float,
        "the rule only where q(n) >= c max q, SpS's test and residual elsewhere (0: off)",
        low=0.0,
        high=1.0,
    ),
)
GUARD_DEFAULTS: dict[str, Any] = {
    "stop": "off",
    "strict_first": 0,
    "relax_in": "all",
    "near_top": 0.0,
}


def did_you_mean(word: Any, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
