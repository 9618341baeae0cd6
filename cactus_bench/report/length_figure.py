"""Per experiment block (pair, m), one figure: AL, answer length λ and score per rule, so a rule's
acceptance gain is read beside what it does to the answers' length and to the task's score.

One row of three panels per task: (a) AL with its 95 % interval (the verifier alone has none),
(b) λ = the rule's generated tokens / the verifier's on the same prompts (paired 95 %; 1 is the
verifier's length), (c) the score (95 %). Drawn only for blocks whose rows carry λ (store/length.py:
rows written before it have none, and get no figure rather than an empty one).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from cactus_bench.report.error_bars import EXCLUDED_NOTE, clipped_errors, mark_excluded
from cactus_bench.report.figure_parts import describe, figure_title, machine_line, sampler_color
from cactus_bench.report.tables import method_label, method_sort_key, task_sort_key, task_title

PANELS = (  # column, title, scale, x-axis label
    ("al", "(a) AL", 1.0, "accepted drafts per step (95 %)"),
    ("length_ratio", "(b) λ", 1.0, "generated tokens / the verifier's (paired 95 %)"),
    ("score", "(c) score", 100.0, "score (%, 95 %)"),
)


def has_length(rows: pd.DataFrame) -> bool:
    return "length_ratio" in rows and rows["length_ratio"].notna().any()


def al_length_score(rows: pd.DataFrame, pair: str, m) -> Figure:
    tasks = sorted(rows["task"].unique(), key=task_sort_key)
    speculative = set(rows.loc[rows["sampler"] != "verifier", "task"])
    tasks = [task for task in tasks if task in speculative] or tasks  # as figure_parts.new_figure
    figure = Figure(figsize=(13.0, 0.5 + 3.2 * len(tasks)), layout="constrained")
    axes = figure.subplots(len(tasks), 3, squeeze=False)
    figure_title(
        figure,
        f"AL, answer length λ and score per rule: {pair}, m = {m or '—'}",
        machine_line(rows, False),
    )
    describe(figure, rows, pair)
    for task, row_axes in zip(tasks, axes, strict=True):
        part = rows[rows["task"] == task]
        ordered = sorted((r for _, r in part.iterrows()), key=method_sort_key)
        labels = [method_label(r) for r in ordered]
        colors = [sampler_color(r["sampler"]) for r in ordered]
        y = np.arange(len(ordered))
        for ax, (column, title, scale, xlabel) in zip(row_axes, PANELS, strict=True):
            values = np.array([_value(r, column) for r in ordered]) * scale  # [rules]
            low = np.array([_value(r, f"{column}_ci_low") for r in ordered]) * scale
            high = np.array([_value(r, f"{column}_ci_high") for r in ordered]) * scale
            shown = ~np.isnan(values)
            bounded = shown & ~np.isnan(low)
            # an interval wholly beside its estimate (a percentile bootstrap can give one) is
            # clipped at the estimate and its point marked, as in every run figure
            errors, excluded = clipped_errors(values[bounded], low[bounded], high[bounded])
            if column == "length_ratio":  # a ratio around 1: points, not bars from 0
                for index in np.flatnonzero(shown):
                    ax.plot(values[index], y[index], "o", color=colors[index])
            else:
                kept = [color for color, keep in zip(colors, shown, strict=True) if keep]
                ax.barh(y[shown], values[shown], color=kept, alpha=0.8)
            ax.errorbar(
                values[bounded],
                y[bounded],
                xerr=errors,
                fmt="none",
                ecolor="0.2",
                capsize=2.5,
                elinewidth=1,
            )
            mark_excluded(ax, values[bounded], y[bounded], excluded, "0.2")
            if column == "length_ratio":
                ax.axvline(1.0, color="0.25", linewidth=1)
                seen = np.append(low[bounded], values[shown])
                if seen.size:  # a task whose rows have no λ keeps matplotlib's limits
                    ax.set_xlim(left=min(0.9, float(seen.min()) - 0.05))
            ax.set_yticks(y, labels if ax is row_axes[0] else [""] * len(y), fontsize=8)
            ax.invert_yaxis()
            ax.set_title(f"{task_title(task)}: {title}", fontsize=9, loc="left")
            ax.set_xlabel(xlabel, fontsize=8)
            ax.set_ylabel("rule" if ax is row_axes[0] else " ", fontsize=8)
            ax.grid(alpha=0.3, axis="x")
    samplers = dict.fromkeys(r for r in rows["sampler"])  # one legend entry per rule family
    handles = [Patch(color=sampler_color(name), alpha=0.8, label=name) for name in samplers]
    marks = {}  # the excluded-interval note, once for the figure
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            marks.setdefault(label, handle)
    handles += [handle for label, handle in marks.items() if label == EXCLUDED_NOTE]
    figure.legend(
        handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False
    )
    return figure


def _value(row, column: str) -> float:
    value = row.get(column)
    return float("nan") if value is None or pd.isna(value) else float(value)
