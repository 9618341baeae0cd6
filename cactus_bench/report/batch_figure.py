"""The batch sweep's figure: per task, speedup against batch per rule beside each rule's score."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from cactus_bench.report.batch import how_m_was_chosen
from cactus_bench.report.error_bars import clipped_errors, mark_excluded
from cactus_bench.report.figure_parts import figure_legend, sampler_color
from cactus_bench.report.load import device_names


def labels(ax) -> list[str]:
    return [artist.get_label() for artist in ax.collections]


def figure(rows: pd.DataFrame, chosen: pd.DataFrame) -> Figure:
    """Per task: speedup against batch per rule (best m, 95 % intervals, 1x line) and, beside
    it, each rule's score at batch 1 with its interval."""
    tasks = sorted(chosen.task.unique())
    devices = device_names(rows)
    fig = Figure(figsize=(11, 4.2 * len(tasks) + 0.8), layout="constrained")
    axes = fig.subplots(len(tasks), 2, squeeze=False, width_ratios=(2.2, 1))
    fig.suptitle(f"Speedup against batch size, embedded pair; timed on {devices}", fontsize=10)
    rules = sorted(chosen.rule.unique())
    # rules of one sampler (Cactus at three budgets) share its colour; marker and dash differ
    styles, seen = {}, {}
    for rule in rules:
        sampler = chosen[chosen.rule == rule].sampler.iloc[0]
        nth = seen[sampler] = seen.get(sampler, -1) + 1
        styles[rule] = ("osD^v"[nth % 5], ("-", "--", ":", "-.")[nth % 4])
    for (speed_ax, score_ax), task in zip(axes, tasks, strict=True):
        part = chosen[chosen.task == task]
        alone = rows[(rows.task == task) & (rows.sampler == "verifier") & (rows.batch == 1)]
        if len(alone) and pd.notna(alone.score.iloc[0]):
            score_ax.axvline(100 * alone.score.iloc[0], color="grey", lw=1, ls="--")
            score_ax.text(100 * alone.score.iloc[0], -0.45, " verifier", color="grey", fontsize=7)
        for index, rule in enumerate(rules):
            line = part[part.rule == rule].sort_values("batch")
            if line.empty:
                continue
            color = sampler_color(line.sampler.iloc[0])
            marker, dash = styles[rule]
            x = line.batch.to_numpy(float) * (1 + 0.025 * (index - len(rules) / 2))  # dodge
            errors, excluded = clipped_errors(
                line.speedup_tokens, line.speedup_tokens_ci_low, line.speedup_tokens_ci_high
            )
            speed_ax.errorbar(
                x,
                line.speedup_tokens,
                yerr=errors,
                color=color,
                marker=marker,
                ls=dash,
                ms=4,
                capsize=2,
                label=rule,
                alpha=0.9,
            )
            mark_excluded(speed_ax, x, line.speedup_tokens, excluded, color)
            drifted = line.drift_marked.fillna(False).to_numpy(bool)
            if drifted.any():  # the machine's speed moved during these runs (drift_marked)
                speed_ax.scatter(
                    x[drifted],
                    line.speedup_tokens.to_numpy(float)[drifted],
                    marker="x",
                    s=70,
                    color="red",
                    zorder=7,
                    label=None if "drift_marked" in labels(speed_ax) else "drift_marked",
                )
            first = line.iloc[0]
            if pd.notna(first.score):
                low, high = first.score_ci_low, first.score_ci_high
                spread = None
                if pd.notna(low):
                    spread = [[100 * max(first.score - low, 0)], [100 * max(high - first.score, 0)]]
                score_ax.errorbar(
                    100 * first.score, index, xerr=spread, color=color, marker=marker, capsize=2
                )
        speed_ax.axhline(1.0, color="grey", lw=1, ls="--")
        speed_ax.set_xscale("log", base=2)
        speed_ax.set_xticks(
            sorted(part.batch.unique()), [str(b) for b in sorted(part.batch.unique())]
        )
        speed_ax.set_xlabel("batch (requests decoded at once)")
        speed_ax.set_ylabel("speedup (throughput / verifier alone)")
        speed_ax.set_title(f"{task}: {how_m_was_chosen(task, rows)}", fontsize=9)
        score_ax.set_yticks(range(len(rules)), rules, fontsize=7)
        score_ax.set_ylim(-0.5, len(rules) - 0.5)
        score_ax.set_xlabel("score at batch 1 (%)")
        score_ax.set_title(f"{task}: task score", fontsize=9)
    figure_legend(fig, [axes[0][0]])
    return fig
