"""Acceptance rate by draft position: one line per method, with the per-position 95% intervals
of a one-run cell as bars (methods side by side around each position so no bar hides another).
"""

from __future__ import annotations

import json

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cactus_bench.report.error_bars import clipped_errors, mark_excluded
from cactus_bench.report.figure_parts import (
    SWEEP_SAMPLERS,
    figure_legend,
    new_figure,
    sampler_color,
    say_missing,
)
from cactus_bench.report.tables import is_missing, method_label, method_sort_key, task_title
from cactus_bench.store.intervals import POSITION_INTERVAL_COLUMNS

POSITION_SPREAD = 0.3  # total width, in positions, over which the methods' bars are spread


def accept_by_position(rows, pair, m) -> Figure:
    figure, axes, tasks = new_figure(rows, pair, m, "Acceptance rate by draft position")
    shades = _sweep_shades(rows[rows["accept_rate_by_pos"].notna()])
    for ax, task in zip(axes, tasks, strict=True):
        task_rows = rows[(rows["task"] == task) & rows["accept_rate_by_pos"].notna()]
        ax.set_title(task_title(task), fontsize=10)
        if task_rows.empty:
            say_missing(ax, f"No per-position acceptance for {task_title(task)}.")
            continue
        ordered = sorted((r for _, r in task_rows.iterrows()), key=method_sort_key)
        errors = [_position_errors(row) for row in ordered]
        # with bars, the methods sit side by side around each position so no bar hides another
        spread = POSITION_SPREAD if any(e is not None for e in errors) else 0.0
        for index, (row, error) in enumerate(zip(ordered, errors, strict=True)):
            rates = json.loads(row["accept_rate_by_pos"])
            defined = [j for j, r in enumerate(rates) if r is not None]
            offset = spread * (index / max(len(ordered) - 1, 1) - 0.5)
            if row["sampler"] in SWEEP_SAMPLERS:
                color = shades[method_label(row)]
                dashes = "-" if row["sampler"] == "cactus" else "-."
            else:
                color, dashes = sampler_color(row["sampler"]), "--"
            label = method_label(row)
            if spread and error is None:  # say why this line alone has no bars
                runs = int(row["n_runs"]) if not is_missing(row.get("n_runs")) else 1
                label += f", mean of {runs} runs: no bars" if runs > 1 else ", no interval"
            x, y = [j + 1 + offset for j in defined], [rates[j] for j in defined]
            ax.plot(x, y, dashes, marker=".", color=color, label=label)
            if error is not None:
                error, excluded = error
                ax.errorbar(x, y, yerr=error[:, defined], fmt="none", ecolor=color, capsize=2)
                mark_excluded(ax, x, y, excluded[defined], color)
        ax.set_xlabel("draft position j (1 = first drafted token)")
        ylabel = "P(position j accepted) over steps"
        if spread:
            ylabel += "\n(bars: 95% bootstrap interval)"  # 2 lines: fits
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.02)
        # whole positions only, half a position of margin: with m = 1 matplotlib would otherwise
        # zoom into a 0.1-wide window around position 1 and label it in hundredths
        width = max(len(json.loads(r["accept_rate_by_pos"])) for r in ordered)
        ax.set_xlim(0.5, width + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.grid(alpha=0.3)
    # the methods in table order, whichever panel shows them first
    methods = sorted((r for _, r in rows.iterrows()), key=method_sort_key)
    figure_legend(figure, axes, order=[method_label(r) for r in methods])
    return figure


def _sweep_shades(rows) -> dict:
    """One color per δ-swept method (a shade of one colormap, ordered as the legend orders them),
    the same in every panel: the figure has one legend for all panels."""
    sweep = [r for _, r in rows.iterrows() if r["sampler"] in SWEEP_SAMPLERS]
    labels = list(dict.fromkeys(method_label(r) for r in sorted(sweep, key=method_sort_key)))
    last = max(len(labels) - 1, 1)
    return {label: colormaps["viridis"](0.1 + 0.75 * i / last) for i, label in enumerate(labels)}


def _position_errors(row) -> tuple[np.ndarray, np.ndarray] | None:
    """([2, m] distances from each rate down and up to its 95% interval's ends, NaN where a
    position has none: matplotlib draws no bar there; [m] bool: the interval excludes the rate),
    or None when the row has no per-position intervals (an older CSV, or a cell averaging
    several runs: report/load.py)."""
    cells = [row.get(name) for name in POSITION_INTERVAL_COLUMNS]
    if any(is_missing(cell) for cell in cells):
        return None
    rates, low, high = (
        np.array(json.loads(cell), dtype=float)  # null -> NaN
        for cell in (row["accept_rate_by_pos"], *cells)
    )
    return clipped_errors(rates, low, high)  # clipped at the rate where it lies beside it
