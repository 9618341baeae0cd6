"""The rules board's figure of one task: one row per arm, grouped by rule family, (a) its AL and
(b) its score minus SpS's, each with its 95 % interval (cactus_bench/report/leaderboard.py)."""

from __future__ import annotations

import math
from itertools import groupby

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from cactus_bench.report.error_bars import clipped_errors, mark_excluded
from cactus_bench.report.figure_parts import MARKERS, describe, figure_legend, sampler_color
from cactus_bench.report.load import device_names


def leaderboard_figure(
    rows: pd.DataFrame, part: pd.DataFrame, task_power: dict | None, m: int
) -> Figure:
    """One row per arm of one task (`part`, in the board's order; `rows`, its runs; m, its
    draft length), grouped by rule family: (a) AL and (b) score minus SpS's, each with its 95 %
    interval (paired in b), in the rule's colour and marker of every other figure; SpS's AL, 0
    and the board's MDE band as references; one legend below the panels."""
    task = part.task.iloc[0]
    count = len(part)
    y = np.arange(count)  # row positions, top to bottom once the axis is inverted
    figure = Figure(figsize=(10.5, 1.8 + 0.25 * count), layout="constrained")
    al_ax, diff_ax = figure.subplots(1, 2, sharey=True)
    start = 0
    for shade, (_, group) in enumerate(groupby(part.rule)):
        size = len(list(group))
        if shade % 2:  # every other family on a faint band, across both panels
            for ax in (al_ax, diff_ax):
                ax.axhspan(start - 0.5, start + size - 0.5, color="0.93", zorder=0, lw=0)
        start += size
    for rule, arms in part.groupby("rule", sort=False):
        at = y[part.rule.to_numpy() == rule]
        color, marker = sampler_color(rule), MARKERS.get(rule, "o")
        style = dict(fmt=marker, color=color, markersize=5, elinewidth=1.3, capsize=2.5)
        xerr, x_out = clipped_errors(arms.al, arms.al_ci_low, arms.al_ci_high)
        al_ax.errorbar(arms.al, at, xerr=xerr, **style)
        mark_excluded(al_ax, arms.al, at, x_out, color)
        paired = arms.score_diff_sps.notna().to_numpy()
        if paired.any():
            shown = arms[paired]
            xerr, x_out = clipped_errors(
                shown.score_diff_sps, shown.score_diff_sps_ci_low, shown.score_diff_sps_ci_high
            )
            diff_ax.errorbar(shown.score_diff_sps, at[paired], xerr=xerr, **style)
            mark_excluded(diff_ax, shown.score_diff_sps, at[paired], x_out, color)
    reference = part[part.rule == "sps"]
    if len(reference):
        al_ax.axvline(
            reference.al.iloc[0],
            color=sampler_color("sps"),
            linestyle="--",
            linewidth=1,
            label="SpS's AL",
            zorder=1,
        )
    diff_ax.axvline(0.0, color="0.25", linewidth=1, zorder=1)
    if task_power and not math.isnan(task_power["mde"]):
        mde = task_power["mde"]
        diff_ax.axvspan(
            -mde,
            mde,
            color="C0",
            alpha=0.12,
            zorder=0,
            lw=0,
            label=f"± {mde:.2f}: the smallest difference from SpS detectable "
            f"with 80 % power at {task_power['n']} prompts",
        )
    al_ax.set_yticks(y, list(part.label))
    al_ax.tick_params(axis="y", labelsize=8, length=0)
    diff_ax.tick_params(axis="y", length=0)
    al_ax.set_ylim(count - 0.5, -0.5)  # the first row on top
    al_ax.set_xlabel(f"AL: accepted drafts per step (m = {m}, 95 % interval)")
    diff_ax.set_xlabel("score − SpS's score, same prompts (paired 95 % interval)")
    al_ax.set_title("(a) accepted length", fontsize=10, loc="left")
    diff_ax.set_title("(b) task score against SpS", fontsize=10, loc="left")
    for ax in (al_ax, diff_ax):
        ax.grid(axis="x", alpha=0.3)
    figure_legend(figure, [al_ax, diff_ax])
    machines = device_names(rows)
    pair = ", ".join(sorted(set(rows.model_pair.astype(str))))
    figure.suptitle(
        f"Rules leaderboard on {task}: {pair} pair, {int(part.n_prompts.max())} prompts\n"
        f"measured on {machines}",
        fontsize=10,
    )
    describe(figure, rows, pair)  # checkpoints and machine in the files' metadata
    return figure
