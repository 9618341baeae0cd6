"""What one run setting declares (`Setting`), and the check of an option's value (`Check`).

The table of every setting is `table.py`; this file only says what a line of it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KINDS = {str: "str", int: "int", float: "float", bool: "bool"}


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "no such value": a setting without an `unhashed` or `verifier_value`


@dataclass(frozen=True)
class Check:
    """What a value must be: `ok(value)`, and the words after "<key> must be "."""

    rule: str
    ok: Callable[[Any], bool]


def at_least(low: int, none: str | None = None, why: str = "") -> Check:
    """`>= low`; `none` (e.g. "for all prompts") when null is allowed and what it means."""
    rule = f">= {low}" + (f" or null {none}".rstrip() if none is not None else "")
    return Check(
        rule + (f"; {why}" if why else ""),
        lambda value: (value is None and none is not None) or (value is not None and value >= low),
    )


def one_of(choices: tuple[str, ...]) -> Check:
    return Check(f"one of {', '.join(choices)}", lambda value: value in choices)


@dataclass(frozen=True)
class Option:
    """A top-level key of the run config: a `RunConf` field, `key=value` on the command line."""

    type: Any  # the field's type, e.g. int or int | None
    default: Any
    check: Check | None = None
    key: str = ""  # "" = the setting's name


@dataclass(frozen=True)
class Setting:
    name: str  # key in the config hash; also the CSV column unless `column` says otherwise
    doc: str  # one line: the column's doc, the config comment and the docs' settings table
    option: Option | None = None
    source: str = ""  # attribute path on RunIdentity; "" = conf.<option key>
    kind: str = ""  # the column's kind ("str" | "int" | "float" | "bool" | "json"); "" = typed
    hashed: bool = True
    column: str | None = ""  # "" = `name`; None = no column of its own
    unhashed: Any = UNSET  # a value left out of the hash (older rows keep their hashes)
    baseline: str | None = None  # place in the baseline-cache key, "sampling.<x>" nests
    grouped: bool = False  # the report gives each value its own cell
    verifier_value: Any = UNSET  # what a verifier-only run records instead

    @property
    def key(self) -> str | None:
        """The command-line key (`RunConf` field) of an option, else None."""
        return (self.option.key or self.name) if self.option else None

    @property
    def path(self) -> str:
        return self.source or f"conf.{self.key}"

    @property
    def csv_column(self) -> str | None:
        return self.name if self.column == "" else self.column

    @property
    def column_kind(self) -> str:
        if self.kind:
            return self.kind
        types = [t for t in getattr(self.option.type, "__args__", (self.option.type,))]
        return next(KINDS[t] for t in types if t in KINDS)
