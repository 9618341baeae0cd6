"""Every rule against Cactus at matched divergence (the CSV's matched_<f>_acceptance_vs rows).

matched       one axis per f: for each arm of each rule, its mean acceptance minus Cactus's
              (Taylor, KL) at the same mean D_f(law || q) (matched.py), against that D_f, with
              the paired 95 % interval. Above zero: the rule accepts more than Cactus for the
              same divergence from q; a rule missing from an axis is infinite or outside
              Cactus's range there.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from cactus_bench.frontier.plot_style import (
    add_title,
    log_x_axis,
    rule_label,
    rule_style,
    stat_rows,
)
from cactus_bench.frontier.plots_divergence import FRONTIER_AXES
from cactus_bench.report.error_bars import EXCLUDED_NOTE, clipped_errors, mark_excluded

REFERENCE = "cactus"  # the curve every other rule is matched against in this figure
LINEAR = 0.01  # the y axis is linear within +-LINEAR


def matched_panels(frame: pd.DataFrame) -> list[tuple[str, str, bool]]:
    """The divergences with at least one matched row against the reference."""
    return [
        axis
        for axis in FRONTIER_AXES
        if not stat_rows(frame, f"matched_{axis[0]}_acceptance_vs:{REFERENCE}").empty
    ]


def matched_figure(frame: pd.DataFrame) -> Figure | None:
    """None for a CSV written before the matched rows existed (no figure to draw)."""
    panels = matched_panels(frame)
    if not panels:
        return None
    figure = Figure(figsize=(4 * len(panels) + 4, 4.8), layout="constrained")
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    handles: dict[str, object] = {}
    for ax, (divergence, name, log) in zip(axes, panels, strict=True):
        matched = stat_rows(frame, f"matched_{divergence}_acceptance_vs:{REFERENCE}")
        spread = matched.merge(
            stat_rows(frame, divergence)[["rule", "parameter", "value"]],
            on=["rule", "parameter"],
            suffixes=("", "_div"),
        )
        for rule, rows in spread.groupby("rule", sort=False):
            rows = rows.sort_values("value_div")
            style = rule_style(rule)
            # a paired percentile interval can lie beside its difference (the labelled GSM8K
            # set): clipped at the estimate and marked, never a negative bar (figure_parts)
            yerr, excluded = clipped_errors(rows.value, rows.ci_low, rows.ci_high)
            drawn = ax.errorbar(
                rows.value_div,
                rows.value,
                yerr=yerr,
                capsize=2,
                markersize=3,
                elinewidth=0.8,
                label=rule_label(rule),
                **style,
            )
            handles.setdefault(rule_label(rule), drawn)
            mark = mark_excluded(ax, rows.value_div, rows.value, excluded, style["color"])
            if mark is not None:
                handles.setdefault(EXCLUDED_NOTE, mark)
        ax.axhline(0, color="0.3", linewidth=1)
        # differences span 1e-4 (exact vs Taylor) to 0.3 (FSD as released): linear within
        # +-LINEAR, logarithmic beyond, so neither end flattens the other
        ax.set_yscale("symlog", linthresh=LINEAR, linscale=1.5)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        if log:
            log_x_axis(ax)
        ax.set_xlabel(f"mean {name}" + (" (log scale)" if log else ""))
        ax.set_ylabel(f"acceptance minus Cactus's (symlog, linear within ±{LINEAR:g})")
        ax.grid(alpha=0.3)
    figure.legend(list(handles.values()), list(handles), loc="outside right center", fontsize=7)
    add_title(
        figure,
        frame,
        "Each rule against Cactus (Taylor) at matched divergence from q (above 0: accepts more;"
        " paired 95 % intervals)",
    )
    return figure
