"""Figures from aggregated results rows: one PNG + PDF per (kind, model pair, m).

Kinds: AL vs δ, score vs δ, speedup vs δ (here; SpS / TAS / Verifier as horizontal references),
score vs AL (tradeoff_figure.py: one marker per sampler, the quality-speed trade-off),
acceptance rate by draft position (position_figure.py: bars, the per-position intervals of a
one-run cell) and AL, answer length λ and score per rule (length_figure.py, for rows with λ);
per pair and task swept over m, speedup and tokens per step vs m (draft_length.py).
Error bars (and shaded bands around the reference lines) are the rows' 95% bootstrap intervals
where the CSV has them; a sweep from an older CSV without them keeps the binomial
standard error for the score and no bars otherwise, and says which in the axis label. A panel
or figure whose data is missing says so in the plot instead of staying blank.
Figures are built with matplotlib's object API (no pyplot state), so any backend works.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from tqdm import tqdm

from cactus_bench.report.draft_length import write_m_figures
from cactus_bench.report.error_bars import (
    bars,
    drifted_points,
    excluded_points,
    mark_drifted,
    mark_excluded,
)
from cactus_bench.report.figure_parts import (
    DELTA_LABEL,
    MARKERS,
    SWEEP_SAMPLERS,
    draw_references,
    figure_legend,
    has_delta_sweep,
    new_figure,
    readable_score_axis,
    sampler_color,
    save_figure,
    say_missing,
)
from cactus_bench.report.length_figure import al_length_score, has_length
from cactus_bench.report.position_figure import accept_by_position
from cactus_bench.report.tables import blocks, task_title
from cactus_bench.report.tradeoff_figure import score_vs_al

# Both sweeps often run the same δ: each is drawn 1.5% to its side of δ, so that neither hides
# the other's marker and interval bar (the axis still reads δ).
DODGE = {"cactus": 0.985, "cactus_exact": 1.015}


def _versus_delta(rows, pair, m, what, column, ylabel, references, scale=1.0, timed=False):
    """`timed`: the column is a timing (a speedup): drifted points get a cross, the verifier's
    1x a line, and the title counts the drift_marked rows."""
    figure, axes, tasks = new_figure(rows, pair, m, what, timed)
    for ax, task in zip(axes, tasks, strict=True):
        task_rows = rows[rows["task"] == task]
        ax.set_title(task_title(task), fontsize=10)
        drew, max_delta, bar_kinds = False, 0.0, set()
        for sampler in SWEEP_SAMPLERS:
            sweep = task_rows[
                (task_rows["sampler"] == sampler)
                & task_rows["delta"].notna()
                & task_rows[column].notna()
            ].sort_values("delta")
            if len(sweep):
                yerr, bar_kind = bars(sweep, column, scale)
                bar_kinds.add(bar_kind if yerr is not None else "")
                ax.errorbar(
                    sweep["delta"].astype(float) * DODGE[sampler],
                    sweep[column].astype(float) * scale,
                    yerr=yerr,
                    capsize=3,
                    marker=MARKERS[sampler],
                    color=sampler_color(sampler),
                    label="Cactus" if sampler == "cactus" else "Cactus-exact",
                )
                x, y = sweep["delta"].astype(float) * DODGE[sampler], sweep[column].astype(float)
                color = sampler_color(sampler)
                mark_excluded(ax, x, y * scale, excluded_points(sweep, column), color)
                if timed:
                    mark_drifted(ax, x, y * scale, drifted_points(sweep), color)
                drew, max_delta = True, max(max_delta, float(sweep["delta"].max()))
        if not drew:
            say_missing(
                ax,
                f"No Cactus δ sweep with {column} for {task_title(task)}\n"
                f"in the input CSVs ({pair}, m = {m}).",
            )
            continue
        draw_references(ax, task_rows, column, references, scale)
        if column == "score":
            readable_score_axis(ax, task_rows["score"], scale)
        if timed:
            ax.axhline(1.0, color="0.6", linewidth=0.8, label="verifier alone (1x)")
        ax.set_xlim(0, 1.08 * max_delta)  # δ = 0 is SpS: the references meet the sweep there
        ax.set_xlabel(DELTA_LABEL)
        kinds = sorted(kind for kind in bar_kinds if kind)
        ax.set_ylabel(f"{ylabel}\n({'; '.join(kinds)})" if kinds else ylabel)  # 2 lines: fits
        ax.grid(alpha=0.3)
    figure_legend(figure, axes)
    return figure


def al_vs_delta(rows, pair, m) -> Figure:
    return _versus_delta(
        rows,
        pair,
        m,
        "Accepted length vs δ",
        "al",
        "AL (accepted draft tokens / step, no bonus)",
        ("sps", "tas"),
    )


def score_vs_delta(rows, pair, m) -> Figure:
    return _versus_delta(
        rows,
        pair,
        m,
        "Task score vs δ",
        "score",
        "score (%)",
        ("verifier", "sps", "tas"),
        scale=100.0,
    )


def speedup_vs_delta(rows, pair, m) -> Figure:
    return _versus_delta(
        rows,
        pair,
        m,
        "Speedup over the verifier vs δ",
        "speedup_tokens",
        "speedup (tokens/s ratio, x)",
        ("sps", "tas"),
        timed=True,
    )


FIGURES: dict[str, Callable] = {
    "al_vs_delta": al_vs_delta,
    "score_vs_delta": score_vs_delta,
    "speedup_vs_delta": speedup_vs_delta,
    "score_vs_al": score_vs_al,
    "accept_by_position": accept_by_position,
    "al_length_score": al_length_score,
}
OPTIONAL_FIGURES = {"al_length_score": has_length}  # drawn only for blocks that have the data


def _slug(text) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-") or "none"


DELTA_FIGURES = ("al_vs_delta", "score_vs_delta", "speedup_vs_delta")


def make_figures(agg: pd.DataFrame, out_dir: str | Path, formats=("png", "pdf")) -> list[Path]:
    """Write every figure kind for every (pair, m) block (the δ figures only for blocks with a
    δ sweep); returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [
        (kind, pair, m, rows)
        for pair, m, rows in blocks(agg)
        for kind in FIGURES
        if kind not in DELTA_FIGURES or has_delta_sweep(rows)
        if OPTIONAL_FIGURES.get(kind, lambda _: True)(rows)
    ]
    written = []
    for kind, pair, m, rows in tqdm(jobs, desc="figures", unit="fig", disable=None):
        figure = FIGURES[kind](rows, pair, m)
        stem = out_dir / f"{kind}__{_slug(pair)}__m{m if m else 'none'}"
        written += save_figure(figure, stem, formats)
    return written + write_m_figures(agg, out_dir, formats, _slug)
