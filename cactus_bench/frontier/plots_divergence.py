"""The emitted law's divergence: the frontier per f and Gamma(delta) against delta.

frontier      acceptance against D_f(law || q), one axis per f, one curve per rule; a rule
              whose law puts mass where q = 0 says at what share of positions it does
gamma         the emitted law's divergence against delta (what the paper's Gamma(delta)
              bounds, Theorem 3): mean, 99th percentile and max over positions, per f
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from cactus_bench.frontier.plot_style import (
    COLORS,
    add_title,
    log_x_axis,
    rule_label,
    rule_style,
    stat_rows,
)

FRONTIER_AXES = (
    ("kl", "KL(law ‖ q)", True),
    ("reverse_kl", "KL(q ‖ law)", True),
    ("chi2", "χ²(law ‖ q)", True),
    ("hellinger", "Hellinger² (no ½)", True),
    ("tv", "TV(law, q)", False),
)
_ROUNDING = 1e-12  # a mean divergence below this is 0 to float64 rounding


def measured_axes(frame: pd.DataFrame) -> list[tuple[str, str, bool]]:
    """The divergences the CSV holds (a CSV written before a divergence was measured has none
    of its rows: no empty panel for it)."""
    return [axis for axis in FRONTIER_AXES if not stat_rows(frame, axis[0]).empty]


def frontier_figure(frame: pd.DataFrame) -> Figure:
    """Acceptance against the mean D_f(law || q), one axis per f; each rule's points joined in
    the order of its parameter, so a curve is that rule's trade-off. A rule whose law puts mass
    where q = 0 (or no mass where q > 0, for KL(q || law)) has an infinite mean there: the
    legend gives the largest share of positions where its law puts mass on q = 0."""
    panels = measured_axes(frame)
    figure = Figure(figsize=(4 * len(panels) + 4, 4.8), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    acceptance = stat_rows(frame, "acceptance")[["rule", "parameter", "value"]]
    sps = acceptance[acceptance.rule == "sps"].value.iloc[0]
    zero = stat_rows(frame, "q_zero_share").groupby("rule").value.max()
    for ax, (divergence, name, log) in zip(axes, panels, strict=True):
        spread = stat_rows(frame, divergence).merge(
            acceptance, on=["rule", "parameter"], suffixes=("", "_acc")
        )
        drawn = False
        for rule, rows in spread.groupby("rule", sort=False):
            if rule == "sps":
                continue
            rows = rows.sort_values("x")
            # on a log axis a mean below rounding is q's own law (a rule that never departs from
            # q, such as FSD unsmoothed here): left off, or the axis would span 1e-18 to 1
            floor = _ROUNDING if log else 0.0
            shown = rows[rows.value.apply(math.isfinite) & (rows.value > floor)]
            label = rule_label(rule)
            if zero.get(rule, 0) > 0:
                label += f" (q = 0 mass at ≤{100 * zero[rule]:.0f}% of positions)"
            ax.plot(shown.value, shown.value_acc, label=label, markersize=3, **rule_style(rule))
            drawn = drawn or not shown.empty
        ax.axhline(
            sps,
            color=COLORS["sps"],
            linestyle="--",
            linewidth=1,
            label=f"SpS (lossless), {sps:.3f}",
        )
        if log and drawn:  # a log axis needs a positive value
            log_x_axis(ax)
        ax.set_xlabel(f"mean {name}" + (" (log scale)" if log else ""))
        ax.set_ylabel("mean acceptance β (exact)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right center", fontsize=7)
    add_title(
        figure,
        frame,
        "Acceptance against the emitted law's divergence, per f (up-left is "
        "better; a rule missing from an axis is infinite there)",
    )
    return figure


def gamma_rules(frame: pd.DataFrame, divergence: str) -> list[str]:
    """The budgeted rules whose budget is this divergence, where the CSV holds their rows."""
    extra = {"kl": ["cactus"], "reverse_kl": ["mentored"]}.get(divergence, [])
    rules = [f"cactus_exact:{divergence}", *extra]
    return [rule for rule in rules if not stat_rows(frame[frame.rule == rule], divergence).empty]


def gamma_figure(frame: pd.DataFrame) -> Figure:
    """Theorem 3's quantity: D_f(law || q) against delta for the budgeted rules, per f. Solid:
    the mean over positions; dashed: the 99th percentile; dotted: the max; grey: y = delta."""
    panels = [axis for axis in measured_axes(frame) if gamma_rules(frame, axis[0])]
    figure = Figure(figsize=(4 * len(panels) + 1, 4.6), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, (divergence, name, _) in zip(axes, panels, strict=True):
        for rule in gamma_rules(frame, divergence):
            style = rule_style(rule)
            for statistic, dash, what in (
                (divergence, "-", "mean"),
                (f"{divergence}_q99", "--", "99th percentile"),
                (f"{divergence}_max", ":", "max"),
            ):
                line = stat_rows(frame[frame.rule == rule], statistic).sort_values("x")
                line = line[line.value.apply(math.isfinite) & (line.value > 0)]
                if line.empty:
                    continue
                ax.plot(
                    line.x,
                    line.value,
                    color=style["color"],
                    marker=style["marker"],
                    linestyle=dash,
                    markersize=3,
                    label=f"{rule_label(rule)}: {what}",
                )
        deltas = sorted(stat_rows(frame, "acceptance").query("rule == 'cactus'").x)
        if deltas:
            ax.plot(deltas, deltas, color="0.6", linewidth=1, label="δ")
        if ax.lines:  # log axes need positive values (an empty grid draws an empty axis)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("δ (budget)")
        ax.set_ylabel(f"{name} of the emitted law")
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    add_title(figure, frame, "Γ(δ): the emitted law's divergence against the budget (Theorem 3)")
    return figure
