"""Colors, markers, labels and the CSV readers shared by the frontier's figures."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

# One color and marker per rule family, shared with the run figures (and COLORS re-exported).
from cactus_bench.report.figure_parts import COLORS, MARKERS

DIVERGENCE_STYLES = {
    "kl": "-",
    "reverse_kl": "--",
    "chi2": "-.",
    "hellinger": ":",
    "tv": (0, (5, 1)),
}
HEADLINE = (
    ("sps", ""),
    ("cactus", "delta=1"),
    ("cactus_exact:kl", "delta=1"),
    ("tas", "eps=0.09"),
    ("topk", "k=5"),
)


# A guarded arm (`cactus+stop=exact`): its rule's color, a marker of its guard's own
GUARD_MARKERS = {"stop": "X", "near_top": "P"}


def rule_style(rule: str) -> dict:
    family, _, divergence = rule.partition(":")
    family, _, guard = family.partition("+")
    style = {"color": COLORS.get(family, "C9"), "marker": MARKERS.get(family, "o")}
    if guard:
        style["marker"] = GUARD_MARKERS.get(guard.partition("=")[0], "o")
    if divergence:
        style["linestyle"] = DIVERGENCE_STYLES.get(divergence, "-")
        style["alpha"] = 1.0 if divergence == "kl" else 0.6
    return style


def rule_label(rule: str) -> str:
    family, _, divergence = rule.partition(":")
    names = {
        "sps": "SpS",
        "cactus": "Cactus (Taylor, KL)",
        "tas": "TAS (ε)",
        "topk": "top-k (k)",
        "interp": "interpolation (α)",
        "greedy": "greedy",
        "mentored": "mentored (δ on KL(q‖π))",
        "lenience": "lenience (l)",
        "fsd": "FSD (T)",
        "fsd_reducible": "FSD reducible (T)",
        "bild": "BiLD (τ)",
        "topband": "near-top (α)",
        "topband_cascade": "near-top OPT cascade (β)",
        "additive": "additive threshold (t)",
        "greedy_margin": "greedy margin (K)",
    }
    if divergence:
        return f"Cactus-exact ({divergence})"
    family, _, guard = family.partition("+")
    return f"{names.get(family, family)}, {guard}" if guard else names.get(family, family)


def grid_value(parameter: str) -> float:
    """`delta=0.5` or `alpha=0.3,processed` -> the grid value."""
    return float(parameter.split(",")[0].split("=")[1]) if "=" in parameter else math.nan


def stat_rows(frame: pd.DataFrame, statistic: str) -> pd.DataFrame:
    rows = frame[frame.statistic == statistic].copy()
    rows["x"] = rows.parameter.map(grid_value)
    return rows


def log_x_axis(ax: Axes) -> None:
    """A log x axis ticked at 1, 2, 5 per decade, labelled as plain numbers (0.05, not 5e-2)."""
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def add_title(figure: Figure, frame: pd.DataFrame, what: str) -> None:
    positions = frame[(frame.rule == "verifier") & (frame.statistic == "positions")]
    count = f", {int(positions.value.iloc[0]):,} positions" if not positions.empty else ""
    pair, prompts = frame.pair.iloc[0], frame.prompt_set.iloc[0]
    figure.suptitle(f"{what}\n{pair}, prompts {prompts}{count}", fontsize=10)
