"""Figures from aggregated results rows: one PNG + PDF per (kind, model pair, m).

Kinds: AL vs δ, score vs δ, speedup vs δ (SpS / TAS / Verifier as horizontal references),
score vs AL (one marker per sampler: the quality-speed trade-off) and acceptance rate by draft
position (bars: the per-position intervals of a one-run cell); per pair and task swept over m,
speedup and tokens per step vs m (draft_length.py).
Error bars (and shaded bands around the reference lines) are the rows' 95% bootstrap intervals
where the CSV has them; a sweep from an older CSV without them keeps the binomial
standard error for the score and no bars otherwise, and says which in the axis label. A panel
or figure whose data is missing says so in the plot instead of staying blank.
Figures are built with matplotlib's object API (no pyplot state), so any backend works.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from tqdm import tqdm

from cactus_bench.report.draft_length import write_m_figures
from cactus_bench.report.figure_parts import (
    DELTA_LABEL,
    MARKERS,
    SWEEP_SAMPLERS,
    bars,
    clipped_errors,
    draw_references,
    excluded_points,
    figure_legend,
    has_delta_sweep,
    interval_errors,
    mark_excluded,
    new_figure,
    readable_score_axis,
    sampler_color,
    save_figure,
    say_missing,
)
from cactus_bench.report.tables import (
    blocks,
    is_missing,
    method_label,
    method_sort_key,
    task_title,
)
from cactus_bench.results.intervals import POSITION_INTERVAL_COLUMNS

# Both sweeps often run the same δ: each is drawn 1.5% to its side of δ, so that neither hides
# the other's marker and interval bar (the axis still reads δ).
DODGE = {"cactus": 0.985, "cactus_exact": 1.015}


def _versus_delta(rows, pair, m, what, column, ylabel, references, scale=1.0, unity=False):
    figure, axes, tasks = new_figure(rows, pair, m, what)
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
                mark_excluded(
                    ax,
                    sweep["delta"].astype(float) * DODGE[sampler],
                    sweep[column].astype(float) * scale,
                    excluded_points(sweep, column),
                    sampler_color(sampler),
                )
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
        if unity:
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
        unity=True,
    )


def score_vs_al(rows, pair, m) -> Figure:
    figure, axes, tasks = new_figure(rows, pair, m, "Quality-speed trade-off")
    label_axes = []
    for ax, task in zip(axes, tasks, strict=True):
        task_rows = rows[(rows["task"] == task)]
        ax.set_title(task_title(task), fontsize=10)
        labels, shown_bars = [], False  # (AL, score %, text, color) of each δ point
        points = task_rows[task_rows["al"].notna() & task_rows["score"].notna()]
        if points.empty:
            say_missing(ax, f"No speculative rows with AL and score for {task_title(task)}.")
            continue
        for sampler, group in points.groupby("sampler", sort=False):
            ax.scatter(
                group["al"].astype(float),
                group["score"].astype(float) * 100,
                marker=MARKERS.get(sampler, "o"),
                color=sampler_color(sampler),
                s=46,
                label=method_label(group.iloc[0]).split(" (")[0],
            )
            xerr, yerr = interval_errors(group, "al"), interval_errors(group, "score", 100.0)
            if xerr is not None or yerr is not None:  # 95% intervals in both directions
                ax.errorbar(
                    group["al"].astype(float),
                    group["score"].astype(float) * 100,
                    xerr=xerr,
                    yerr=yerr,
                    fmt="none",
                    ecolor=sampler_color(sampler),
                    elinewidth=0.8,
                    alpha=0.6,
                    capsize=2,
                )
                shown_bars = True
                mark_excluded(
                    ax,
                    group["al"].astype(float),
                    group["score"].astype(float) * 100,
                    excluded_points(group, "al") | excluded_points(group, "score"),
                    sampler_color(sampler),
                )
            if sampler in SWEEP_SAMPLERS:
                labels += [
                    (float(row["al"]), float(row["score"]) * 100, f"δ={float(row['delta']):g}")
                    + (sampler_color(sampler),)
                    for _, row in group.iterrows()
                ]
        draw_references(ax, task_rows, "score", ("verifier",), 100.0)
        readable_score_axis(ax, task_rows["score"], 100.0)
        ax.margins(0.12)  # room for the δ labels
        label_axes.append((ax, labels))
        ax.set_xlabel("AL (accepted draft tokens / step, no bonus)")
        ax.set_ylabel("score (%)" + ("\n(bars, both axes: 95% bootstrap interval)" * shown_bars))
        ax.grid(alpha=0.3)
    figure_legend(figure, axes)
    figure.draw_without_rendering()  # final layout and limits: label boxes are placed in pixels
    for ax, labels in label_axes:
        _place_labels(ax, labels)
    return figure


LABEL_FONTSIZE = 7


def _place_labels(ax: Axes, labels: list[tuple]) -> None:
    """Greedy placement of the δ labels: each takes the first of a few spots around its marker
    whose box overlaps no marker and no label placed before it (sweep points often share a
    score, so one fixed offset prints labels over each other)."""
    if not labels:
        return
    px = ax.figure.dpi / 72  # pixels per point
    centres = ax.transData.transform([(x, y) for x, y, _, _ in labels])
    # the markers themselves, ~10 pt wide, are taken from the start
    taken = [(cx - 5 * px, cy - 5 * px, cx + 5 * px, cy + 5 * px) for cx, cy in centres]
    for own, ((x, y, text, color), (cx, cy)) in enumerate(zip(labels, centres, strict=True)):
        w, h = 0.62 * LABEL_FONTSIZE * len(text), LABEL_FONTSIZE  # label box, in points
        # right-above, right-below, left-above, left-below, then further up / down on the right
        spots = [(4, 3), (4, -3 - h), (-4 - w, 3), (-4 - w, -3 - h)]
        spots += [(4, 12), (4, -12 - h), (4, 21), (4, -21 - h)]
        boxes = [
            (cx + dx * px, cy + dy * px, cx + (dx + w) * px, cy + (dy + h) * px) for dx, dy in spots
        ]
        others = taken[:own] + taken[own + 1 :]  # a label may touch its own marker
        free = [i for i, box in enumerate(boxes) if not any(_overlap(box, t) for t in others)]
        pick = free[0] if free else 0
        taken.append(boxes[pick])
        ax.annotate(
            text,
            (x, y),
            textcoords="offset points",
            xytext=spots[pick],
            fontsize=LABEL_FONTSIZE,
            color=color,
            va="bottom",
            ha="left",
            # a faint leader line once a label had to move away from its marker
            arrowprops=None if pick == 0 else {"arrowstyle": "-", "lw": 0.4, "color": color},
            # readable where an interval bar runs behind it
            bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none", "alpha": 0.85},
            zorder=5,
        )


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


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


POSITION_SPREAD = 0.3  # total width, in positions, over which the methods' bars are spread


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


FIGURES: dict[str, Callable] = {
    "al_vs_delta": al_vs_delta,
    "score_vs_delta": score_vs_delta,
    "speedup_vs_delta": speedup_vs_delta,
    "score_vs_al": score_vs_al,
    "accept_by_position": accept_by_position,
}


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
    ]
    written = []
    for kind, pair, m, rows in tqdm(jobs, desc="figures", unit="fig", disable=None):
        figure = FIGURES[kind](rows, pair, m)
        stem = out_dir / f"{kind}__{_slug(pair)}__m{m if m else 'none'}"
        written += save_figure(figure, stem, formats)
    return written + write_m_figures(agg, out_dir, formats, _slug)
