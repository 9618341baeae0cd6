"""What the figures share: one color and marker per sampler, the figure frame with its machine
line, and reference lines with their interval bands (see plots.py); the error bars and the
point marks are in error_bars.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cactus_bench.report.error_bars import drifted_points
from cactus_bench.report.load import device_names
from cactus_bench.report.tables import (
    is_missing,
    method_label,
    pair_title,
    task_sort_key,
)

SWEEP_SAMPLERS = ("cactus", "cactus_exact")  # the samplers with a δ axis
COLORS = {
    "verifier": "0.35",
    "sps": "C0",
    "tas": "C1",
    "cactus": "C3",
    "cactus_exact": "C4",
    "interp": "C2",
    "topk": "C5",
    "greedy": "C6",
    "mentored": "C7",
    "lenience": "C8",
    "chow": "#17becf",
    "diff": "#aec7e8",
    "opt": "#393b79",
    "tokenv1": "#e7ba52",
    "tokenv2": "#98df8a",
    "tokenv3": "#2ca02c",
    "fsd": "#c5b0d5",
    "fsd_reducible": "#8c564b",
    "bild": "#e377c2",
    "ensemble": "#9edae5",
    "fly": "#843c39",
    "fsd_unsmoothed": "#c7c7c7",
    "topband": "#bcbd22",
    "topband_cascade": "#7f7f7f",
    "additive": "#ff9896",
    "greedy_margin": "#c49c94",
}  # one color per sampler in every figure (run tables, the frontier, the rules leaderboard)
REFERENCE_STYLES = {"verifier": ("Verifier", "-"), "sps": ("SpS", "--"), "tas": ("TAS", ":")}
MARKERS = {
    "verifier": "*",
    "sps": "o",
    "tas": "s",
    "cactus": "^",
    "cactus_exact": "v",
    "interp": "D",
    "topk": "P",
    "greedy": "X",
    "mentored": "*",
    "lenience": "h",
}
DELTA_LABEL = "δ (KL divergence budget, nats)"


def sampler_color(sampler: str) -> str:
    return COLORS.get(sampler, "C9")


def say_missing(ax: Axes, text: str) -> None:
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        wrap=True,
        fontsize=9,
        transform=ax.transAxes,
        color="0.3",
    )
    ax.set_xticks([])
    ax.set_yticks([])


def cell_value(row, column: str, scale: float = 1.0) -> float | None:
    return None if is_missing(row[column]) else float(row[column]) * scale


def describe(figure: Figure, rows: pd.DataFrame, pair: str) -> None:
    """What the short title leaves out, kept in the saved files' metadata (save_figure): the
    checkpoints (drafter -> verifier) and the machine the timings come from."""
    figure.set_label(f"{pair_title(rows, pair)}; timed on {device_names(rows)}")


def machine_line(rows: pd.DataFrame, timed: bool) -> str:
    """The title's second line: the machine (the CPU kind changes between sessions, and a number
    means little without it) and, on a figure of timings, how many rows are drift_marked."""
    line = f"{'timed' if timed else 'decoded'} on {device_names(rows)}"
    drifted = drifted_points(rows)
    if timed and drifted.any():
        line += f"; {int(drifted.sum())} of {len(rows)} rows drift_marked: timings suspect"
    return line


def figure_title(figure: Figure, first: str, machine: str) -> None:
    """A short first line and the machine line (machine_line), wrapped to the figure's width."""
    wrapped = textwrap.fill(machine, width=int(12.5 * figure.get_figwidth()))
    figure.suptitle(f"{first}\n{wrapped}", fontsize=10)


def new_figure(
    rows: pd.DataFrame, pair: str, m, what: str, timed: bool = False
) -> tuple[Figure, list[Axes], list]:
    """One panel per task under a short title (what, the pair's short name, m) and the machine
    (`timed`: the figure shows timings, so the line also counts drift_marked rows).

    A task with only verifier rows in this block (the verifier joins every m of its pair, so a
    task swept at one m alone has nothing else at the others) gets no panel: every figure here
    compares speculative rules. A block with no speculative row at all keeps its panels, which
    then say what is missing."""
    tasks = sorted(rows["task"].unique(), key=task_sort_key)
    speculative = set(rows.loc[rows["sampler"] != "verifier", "task"])
    tasks = [task for task in tasks if task in speculative] or tasks
    width = 4.6 * len(tasks) + 0.6
    figure = Figure(figsize=(width, 4.2), layout="constrained")
    axes = figure.subplots(1, len(tasks), squeeze=False)[0]
    figure_title(figure, f"{what}: {pair}, m = {m if m else '—'}", machine_line(rows, timed))
    describe(figure, rows, pair)
    return figure, list(axes), tasks


LEGEND_FONTSIZE = 8


def figure_legend(figure: Figure, axes, order: list[str] | None = None) -> None:
    """One legend for the whole figure, below the panels, instead of one inside each panel:
    inside, a legend covers whatever its corner holds (the largest δ's points and bars, an
    interval band), and matplotlib's "best" spot still overlaps data once bands fill a panel.
    The panels share their methods and styles, so entries are merged by label, in first-seen
    order or in `order` (labels not in it last); the columns are as many as the width holds."""
    entries: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    if not entries:
        return
    if order is not None:
        rank: dict[str, int] = {}
        for index, label in enumerate(order):
            rank.setdefault(label, index)

        def place(label: str) -> tuple[int, bool]:
            # a label with a note ("..., no interval") right after its plain form; others last
            return rank.get(label, rank.get(label.split(",")[0], len(order))), label not in rank

        entries = dict(sorted(entries.items(), key=lambda item: place(item[0])))
    inches_per_entry = 0.6 + 0.065 * max(len(label) for label in entries)  # handle + text
    columns = max(1, min(len(entries), int(figure.get_figwidth() / inches_per_entry)))
    figure.legend(
        list(entries.values()),
        list(entries),
        loc="outside lower center",
        ncols=columns,
        fontsize=LEGEND_FONTSIZE,
        frameon=False,
    )


def readable_score_axis(ax: Axes, scores: pd.Series, scale: float) -> None:
    """Plain tick labels, and a +-5 point band when every score is the same (e.g. all 0 %):
    matplotlib would otherwise zoom into float noise and label the axis '1e-17'."""
    ax.yaxis.get_major_formatter().set_useOffset(False)
    values = scores.dropna().astype(float) * scale
    if len(values) and values.max() - values.min() < 1e-6:
        ax.set_ylim(values.iloc[0] - 5.0, values.iloc[0] + 5.0)


def draw_references(ax: Axes, rows: pd.DataFrame, column: str, samplers, scale=1.0) -> None:
    """Horizontal lines for the reference methods, each in a faint band of its 95% interval."""
    for sampler in samplers:
        label, style = REFERENCE_STYLES[sampler]
        color = sampler_color(sampler)
        for _, row in rows[rows["sampler"] == sampler].iterrows():
            value = cell_value(row, column, scale)
            if value is not None:
                ax.axhline(
                    value,
                    linestyle=style,
                    color=color,
                    linewidth=1.3,
                    label=method_label(row) if sampler == "tas" else label,
                )
                low, high = (row.get(f"{column}_ci_{end}") for end in ("low", "high"))
                if not (low is None or high is None or is_missing(low) or is_missing(high)):
                    ax.axhspan(float(low) * scale, float(high) * scale, color=color, alpha=0.1)


def save_figure(figure: Figure, stem: Path, formats) -> list[Path]:
    """Write `figure` as <stem>.<fmt> for each format; returns the paths.

    Redrawing the same CSV gives the same bytes (no git churn, `make plots` testable): the files
    carry no creation date and no matplotlib version. The figure's label (`describe`: the
    checkpoints and the machine) goes into the metadata: PNG Description, PDF Subject."""
    description = figure.get_label() or None
    metadata = {
        "png": {"Software": None, "Description": description},
        "pdf": {"CreationDate": None, "Creator": None, "Producer": None, "Subject": description},
    }
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        figure.savefig(path, dpi=150, metadata=metadata.get(fmt))
        paths.append(path)
    return paths


def has_delta_sweep(rows: pd.DataFrame) -> bool:
    """Whether any δ-swept rule has at least two δ values in `rows` (else a δ axis shows one
    point per rule: e.g. the m blocks of an m sweep that runs Cactus at one δ)."""
    swept = rows[rows["sampler"].isin(SWEEP_SAMPLERS) & rows["delta"].notna()]
    return bool(len(swept)) and int(swept.groupby("sampler")["delta"].nunique().max()) >= 2
