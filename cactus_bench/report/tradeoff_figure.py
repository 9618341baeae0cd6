"""Score vs AL: one marker per sampler and δ point, the quality-speed trade-off of each task.

Each δ point of a sweep carries its δ as a label; the labels are placed after the layout is final
(`_place_labels`), so that none covers a marker or another label.
"""

from __future__ import annotations

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cactus_bench.report.error_bars import excluded_points, interval_errors, mark_excluded
from cactus_bench.report.figure_parts import (
    MARKERS,
    SWEEP_SAMPLERS,
    draw_references,
    figure_legend,
    new_figure,
    readable_score_axis,
    sampler_color,
    say_missing,
)
from cactus_bench.report.tables import method_label, task_title


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
