"""The results CSV schema: how a row's values become cells and how cells are read back.

Every column (columns.py) has a kind that fixes how a Python value becomes a cell and how a cell
is read back. A missing value is an EMPTY cell, never 0: a verifier-only run has no AL, an
errored run has no timings. `row_to_cells` is the only way a row reaches disk, so a typo in a
column name, a NaN disguised as a number or an error row carrying stale timings (a pitfall
Spec-Bench hit) fails loudly before anything is written.
"""

from __future__ import annotations

import json
import math
import numbers

import numpy as np
import pandas as pd

from cactus_bench.store.columns import (
    COLUMNS,
    CONFIG_COLUMNS,
    MEASUREMENT_COLUMNS,
    RENAMED_COLUMNS,
    REQUIRED_COLUMNS,
    SCHEMA,
    STATUSES,
    Column,
)

__all__ = [
    "COLUMNS",
    "CONFIG_COLUMNS",
    "MEASUREMENT_COLUMNS",
    "RENAMED_COLUMNS",
    "REQUIRED_COLUMNS",
    "SCHEMA",
    "STATUSES",
    "Column",
    "coerce_frame",
    "format_cell",
    "row_to_cells",
]


def _is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value == ""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return math.isnan(float(value))
    return value is pd.NA or value is pd.NaT


def format_cell(name: str, value) -> str:
    """One cell's text for column `name`; raises ValueError when the value does not fit."""
    column = SCHEMA[name]
    if _is_missing(value):
        return ""
    kind = column.kind
    if kind == "str":
        text = str(value)
        if "\n" in text or "\r" in text:
            # A newline would survive CSV quoting but breaks grep/tail-style inspection and the
            # single-line error contract; flatten it.
            text = " ".join(text.split())
        return text
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return "true" if bool(value) else "false"
        raise ValueError(f"column {name!r} wants a bool, got {value!r}")
    if kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError(f"column {name!r} wants an integer, got {value!r}")
        if float(value) != int(value):
            raise ValueError(f"column {name!r} wants an integer, got non-integral {value!r}")
        return str(int(value))
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError(f"column {name!r} wants a number, got {value!r}")
        if math.isinf(float(value)):
            raise ValueError(
                f"column {name!r} got {value!r}; store a finite number or leave it empty (None)"
            )
        return repr(float(value))
    if kind == "json":
        if isinstance(value, str):
            json.loads(value)  # must already be valid JSON
            return value
        return json.dumps(_json_safe(value), separators=(",", ":"), sort_keys=True, allow_nan=False)
    raise AssertionError(f"unknown column kind {kind!r}")


def _json_safe(value):
    """NaN inside a JSON list/dict becomes null (JSON has no NaN); numpy scalars become Python."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def row_to_cells(row: dict, columns: list[str] | None = None) -> list[str]:
    """Validate `row` and return its cells in `columns` order (default COLUMNS).

    Unknown keys are an error (add the column to columns.py); keys in `columns` but not in the
    schema (written by a newer version of the harness) are left empty.
    """
    unknown = sorted(set(row) - set(SCHEMA))
    if unknown:
        raise ValueError(
            f"unknown result column(s) {unknown}; known columns are "
            "cactus_bench.store.COLUMNS (add new ones in store/columns.py)"
        )
    for name in REQUIRED_COLUMNS:
        if _is_missing(row.get(name)):
            raise ValueError(f"result row is missing required column {name!r}")
    status = row["status"]
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    if status == "error":
        if _is_missing(row.get("error")):
            raise ValueError("an error row needs a one-line message in column 'error'")
        stale = [c for c in MEASUREMENT_COLUMNS if not _is_missing(row.get(c))]
        if stale:
            raise ValueError(
                f"an error row must leave measured columns empty, got {stale}: "
                "a failed run must not carry stale numbers"
            )
    score = row.get("score")
    if not _is_missing(score) and isinstance(score, numbers.Real) and not 0 <= score <= 1:
        raise ValueError(
            f"score must be a fraction in [0, 1] (as lm-eval reports it), got "
            f"{score!r}; the report shows it as a percentage"
        )
    for low_name in (name for name in row if name.endswith("_ci_low")):
        low, high = row[low_name], row.get(low_name[: -len("low")] + "high")
        if _is_missing(low) or _is_missing(high):
            continue
        if SCHEMA[low_name].kind == "json":  # per-position lists: end by end
            low, high = (json.loads(v) if isinstance(v, str) else list(v) for v in (low, high))
            if len(low) != len(high):
                raise ValueError(f"{low_name} has {len(low)} entries but its upper end {len(high)}")
        pairs = zip(low, high, strict=True) if isinstance(low, list) else [(low, high)]
        if any(not _is_missing(a) and not _is_missing(b) and a > b for a, b in pairs):
            raise ValueError(f"{low_name} = {low!r} is above its upper end {high!r}")
    cells = {name: format_cell(name, value) for name, value in row.items()}
    return [cells.get(name, "") for name in (columns or COLUMNS)]


def coerce_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Give the columns of a CSV read as text their schema types (missing -> NA, never 0).

    Columns an older harness wrote under another name get their current one first."""
    frame = frame.rename(columns=RENAMED_COLUMNS)
    for name in frame.columns:
        column = SCHEMA.get(name)
        text = frame[name].astype("string").replace("", pd.NA)
        if column is None or column.kind in ("str", "json"):
            frame[name] = text
        elif column.kind == "float":
            frame[name] = pd.to_numeric(text, errors="raise").astype("Float64")
        elif column.kind == "int":
            frame[name] = pd.to_numeric(text, errors="raise").astype("Int64")
        elif column.kind == "bool":
            lowered = text.str.lower()
            bad = lowered.dropna()[~lowered.dropna().isin(["true", "false"])]
            if len(bad):
                raise ValueError(f"column {name!r} holds non-boolean values {list(bad[:3])}")
            frame[name] = lowered.map({"true": True, "false": False}).astype("boolean")
    return frame
