"""Error bars from the rows' 95 % intervals, and the marks a point can carry: an open diamond
where its interval lies beside it, a cross where its machine's speed moved (drift_marked).
The figures' frame, colours and references live in figure_parts.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

# A percentile (bootstrap) interval need not contain its point estimate: the estimate of a ratio
# or of a difference at matched divergence can sit beside the resamples' 2.5-97.5 % range.
# matplotlib refuses a negative bar length ("'yerr' must not contain negative values"), so such
# an interval is drawn clipped at the estimate (only its part on the far side shows) and the
# point gets an open diamond, explained once in the legend.
EXCLUDED_NOTE = "open diamond: the 95 % interval excludes the estimate (bar clipped at it)"


def clipped_errors(value, low, high) -> tuple[np.ndarray, np.ndarray]:
    """([2, n] distances from each estimate down to `low` and up to `high`, never negative: the
    asymmetric yerr / xerr; [n] bool: the interval lies wholly beside its estimate)."""
    value, low, high = (np.asarray(x, dtype=float) for x in (value, low, high))
    errors = np.vstack([value - low, high - value])
    excluded = (errors < 0).any(axis=0)  # NaN (no interval) compares False: not marked
    return np.clip(errors, 0.0, None), excluded


def mark_excluded(ax: Axes, x, y, excluded: np.ndarray, color) -> object | None:
    """Open diamonds on the points whose interval excludes them (none: nothing is drawn, so a
    figure without such a point is byte-identical to one drawn before this mark existed). The
    legend label is given once per axes; returns the artist, for legends built by hand."""
    style = {"marker": "D", "s": 64, "facecolors": "none", "edgecolors": color, "linewidths": 1.2}
    return _mark(ax, x, y, excluded, EXCLUDED_NOTE, style)


def _mark(ax: Axes, x, y, chosen: np.ndarray, note: str, style: dict) -> object | None:
    """Scatter `style` over the chosen points, `note` in the legend once per axes."""
    if not chosen.any():
        return None
    labels = [artist.get_label() for artist in ax.collections]
    return ax.scatter(
        np.asarray(x, dtype=float)[chosen],
        np.asarray(y, dtype=float)[chosen],
        zorder=6,
        label="_nolegend_" if note in labels else note,
        **style,
    )


def interval_errors(rows: pd.DataFrame, column: str, scale: float = 1.0) -> np.ndarray | None:
    """[2, n] distances from each point down and up to its 95% interval's ends (matplotlib's
    asymmetric yerr / xerr, clipped at the estimate: `clipped_errors`), or None unless every row
    has an interval for `column`. `excluded_points` says which points to mark."""
    low, high = f"{column}_ci_low", f"{column}_ci_high"
    if low not in rows or high not in rows or rows[[low, high]].isna().any().any():
        return None
    value = rows[column].astype(float).to_numpy() * scale
    return clipped_errors(
        value, rows[low].astype(float).to_numpy() * scale, rows[high].astype(float) * scale
    )[0]


def excluded_points(rows: pd.DataFrame, column: str) -> np.ndarray:
    """[n] bool: the rows whose 95% interval for `column` lies beside the estimate."""
    low, high = f"{column}_ci_low", f"{column}_ci_high"
    if column not in rows or low not in rows or high not in rows:
        return np.zeros(len(rows), dtype=bool)
    values = (pd.to_numeric(rows[name], errors="coerce") for name in (column, low, high))
    return clipped_errors(*values)[1]


def score_stderr(rows: pd.DataFrame, scale: float) -> list[float] | None:
    """Binomial standard error sqrt(p (1 - p) / n) of each accuracy (n = prompts scored)."""
    if "n_prompts" not in rows or rows["n_prompts"].isna().any():
        return None
    p = rows["score"].astype(float)
    return list(scale * (p * (1 - p) / rows["n_prompts"].astype(float)) ** 0.5)


DRIFT_NOTE = "×: drift_marked (the machine's speed moved: timing suspect)"


def drifted_points(rows: pd.DataFrame) -> np.ndarray:
    """[n] bool: the rows whose machine's speed moved during their run (drift_marked)."""
    if "drift_marked" not in rows:
        return np.zeros(len(rows), dtype=bool)
    return rows["drift_marked"].astype("boolean").fillna(False).to_numpy(bool)


def mark_drifted(ax: Axes, x, y, drifted: np.ndarray, color) -> object | None:
    """A cross over each drifted point (as mark_excluded: nothing drawn when none is)."""
    style = {"marker": "x", "s": 90, "color": color, "linewidths": 1.4}
    return _mark(ax, x, y, drifted, DRIFT_NOTE, style)


def bars(sweep: pd.DataFrame, column: str, scale: float) -> tuple[object, str]:
    """(yerr, what the bars are) for one sweep: intervals, else the score's s.e., else none."""
    errors = interval_errors(sweep, column, scale)
    if errors is not None:
        return errors, "bars: 95% bootstrap interval"
    if column == "score":
        return score_stderr(sweep, scale), "bars: ±1 binomial s.e."
    return None, ""
