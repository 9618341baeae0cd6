"""Speedup and tokens per step against the draft length m: which m pays on this machine.

One figure per (model pair, task) whose rows span at least two values of m, one line per method
(sampler and its parameters) with its 95% bootstrap intervals as bars. The speedup rises with m
while the extra drafted tokens are still accepted often enough to pay for the drafter's steps
and the wider verify, then falls: the best m depends on the acceptance rate and on the device.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cactus_bench.report.error_bars import (
    bars,
    drifted_points,
    excluded_points,
    mark_drifted,
    mark_excluded,
)
from cactus_bench.report.figure_parts import (
    MARKERS,
    describe,
    figure_legend,
    figure_title,
    machine_line,
    sampler_color,
    save_figure,
)
from cactus_bench.report.tables import method_label, task_title

PANELS = (
    ("speedup_tokens", "speedup over the verifier (tokens/s ratio, x)"),
    ("tokens_per_step", "tokens per verifier step (bonus included)"),
)


def m_sweeps(agg: pd.DataFrame):
    """Yield (pair, task, rows) for each pair and task with speculative rows at >= 2 values of m."""
    speculative = agg[(agg["sampler"] != "verifier") & agg["m"].notna()]
    for (pair, task), rows in speculative.groupby(["model_pair", "task"], sort=True):
        if rows["m"].nunique() >= 2:
            yield pair, task, rows


def versus_m(rows: pd.DataFrame, pair: str, task: str) -> Figure:
    figure = Figure(figsize=(10.0, 4.2), layout="constrained")
    axes = figure.subplots(1, len(PANELS), squeeze=False)[0]
    figure_title(figure, f"Draft length m: {pair}, {task_title(task)}", machine_line(rows, True))
    describe(figure, rows, pair)
    methods = rows.assign(_label=[method_label(r) for _, r in rows.iterrows()])
    for ax, (column, ylabel) in zip(axes, PANELS, strict=True):
        bar_kinds = set()
        for label, line in methods.groupby("_label", sort=True):
            line = line[line[column].notna()].sort_values("m")
            if line["m"].nunique() < 2:
                continue  # one point is not a curve (e.g. an arm run only at the demo's m)
            sampler = line["sampler"].iloc[0]
            yerr, kind = bars(line, column, 1.0)
            bar_kinds.add(kind if yerr is not None else "")
            ax.errorbar(
                line["m"].astype(int),
                line[column].astype(float),
                yerr=yerr,
                capsize=3,
                marker=MARKERS.get(sampler, "o"),
                color=sampler_color(sampler),
                label=label,
            )
            x, y, color = line["m"].astype(int), line[column].astype(float), sampler_color(sampler)
            mark_excluded(ax, x, y, excluded_points(line, column), color)
            if column == "speedup_tokens":  # a timing: a cross where the machine's speed moved
                mark_drifted(ax, x, y, drifted_points(line), color)
        if column == "speedup_tokens":
            ax.axhline(1.0, color="0.6", linewidth=0.8, label="verifier alone (1x)")
        kinds = sorted(kind for kind in bar_kinds if kind)
        ax.set_ylabel(f"{ylabel}\n({'; '.join(kinds)})" if kinds else ylabel)
        ax.set_xlabel("m (draft tokens per step)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    figure_legend(figure, axes, order=sorted(methods["_label"].unique()))  # the 1x line last
    return figure


def write_m_figures(agg: pd.DataFrame, out_dir: Path, formats, slug) -> list[Path]:
    written = []
    for pair, task, rows in m_sweeps(agg):
        stem = out_dir / f"speedup_vs_m__{slug(pair)}__{slug(task)}"
        written += save_figure(versus_m(rows, pair, task), stem, formats)
    return written
