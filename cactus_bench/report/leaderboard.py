"""The rules leaderboard's table and figure, from the runs' CSV alone (`make rules-report`).

    from cactus_bench.report.leaderboard import write_leaderboard
    write_leaderboard(Path("results/rules/rules.csv"), Path("results/rules"),
                      Path("results/frontier/smollm2_135m.csv"))

One row per (rule, parameters, task) of the runs (scripts/rules_board.py runs them), joined with
each arm's exact first-draft acceptance and emitted-law KL(law || q) from the frontier CSV where
the frontier has that arm. Writes leaderboard.csv, leaderboard.md, leaderboard.definitions.md
and figures/score_vs_al.{png,pdf}: the task score against the measured accepted length (AL),
one curve per rule, both with their 95 % intervals (the runs' own bootstrap over prompts).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from cactus_bench.report.figure_parts import (
    COLORS,
    MARKERS,
    clipped_errors,
    describe,
    figure_legend,
    mark_excluded,
    sampler_color,
    save_figure,
)
from cactus_bench.results.schema import RENAMED_COLUMNS

# The frontier's parameter label of an arm (frontier/arms.py), to join its exact statistics.
FRONTIER_LABEL = {
    "cactus": "delta",
    "cactus_exact": "delta",
    "mentored": "delta",
    "lenience": "l",
    "tas": "eps",
    "ensemble": "alpha",
}
FRONTIER_SOURCE = {"gsm8k": "gsm8k_test"}  # the frontier's prompt source of each task
FRONTIER_RULE = {"ensemble": "interp"}  # the alias runs as interp (alpha = 1 - w)

DEFINITIONS = """# Definitions for leaderboard.csv

One row per (rule, parameters, task) of results/rules/rules.csv, the embedded pair (SmolLM2-135M
verifier, its distilled drafter), m and sampling as in the run (scripts/rules_board.py).

- `rule`, `params`: the sampler and its parameters (docs/rules.md); `ensemble` runs as interp
- `task`, `n_prompts`: the task and the prompts scored
- `score`, `score_ci_low`, `score_ci_high`: headline task score and its 95 % interval
  (bootstrap over prompts, results/intervals.py)
- `accept_rate`: accepted drafts / drafted tokens, measured by the engine
- `al`, `al_ci_low`, `al_ci_high`: accepted drafts per verification step (no bonus)
- `speedup_tokens`, `speedup_tokens_ci_low`, `speedup_tokens_ci_high`: tokens/s against the
  verifier alone (the baseline as `baseline_mode` in rules.csv says; on a shared CPU the
  machine's load moves it between runs, so compare acceptance and AL first)
- `frontier_acceptance`: the exact mean probability that one draft is accepted, for this arm
  on the frontier's held-out contexts of the task's own source (`acceptance@source=demo` or
  `=gsm8k_test` in results/frontier/<pair>.csv), where the frontier has the arm; empty
  otherwise. It is a first-draft rate: `accept_rate` also counts later drafts, accepted only
  after every earlier one
- `frontier_kl`: the exact mean KL(law || q) of the emitted law for this arm over all the
  frontier's held-out contexts; inf when the law puts mass where q = 0
"""


def part_m(rows, task: str) -> int:
    """The draft length of a task's rows (the board runs one m)."""
    values = set(rows[rows.task == task].m.astype(int))
    if len(values) != 1:
        raise ValueError(
            f"rules board: task {task} has rows at several m {sorted(values)}: keep one m per "
            "runs CSV (a board compares rules at one draft length)"
        )
    return values.pop()


def write_leaderboard(rows_csv: Path, out_dir: Path, frontier_csv: Path) -> list[Path]:
    """Table, definitions and figure of the runs in rows_csv into out_dir; returns the figures."""
    # rows written before the renames (n_samples, speedup) read under today's names
    rows = pd.read_csv(rows_csv).rename(columns=RENAMED_COLUMNS)
    rows = rows[rows.status == "ok"].copy()
    rows["params"] = rows.sampler_params.map(lambda text: json.dumps(json.loads(text)))
    frontier = pd.read_csv(frontier_csv) if frontier_csv.is_file() else None

    def exact(row, statistic):
        params = json.loads(row.sampler_params)
        key = FRONTIER_LABEL.get(row.sampler)
        label = f"{key}={params[key if key != 'eps' else 'threshold']:g}" if key else ""
        rule = FRONTIER_RULE.get(row.sampler, row.sampler)
        if row.sampler == "cactus_exact":
            rule = f"cactus_exact:{params['divergence']}"
        if frontier is None or (key is None and row.sampler != "sps"):
            return math.nan
        hit = frontier[
            (frontier.rule == rule)
            & (frontier.parameter.fillna("") == label)
            & (frontier.statistic == statistic)
        ]
        return float(hit.value.iloc[0]) if len(hit) else math.nan

    rows["frontier_acceptance"] = rows.apply(
        lambda r: exact(r, f"acceptance@source={FRONTIER_SOURCE.get(r.task, r.task)}"), axis=1
    )
    rows["frontier_kl"] = rows.apply(lambda r: exact(r, "kl"), axis=1)
    columns = [
        "sampler",
        "params",
        "task",
        "n_prompts",
        "score",
        "score_ci_low",
        "score_ci_high",
        "accept_rate",
        "al",
        "al_ci_low",
        "al_ci_high",
        "speedup_tokens",
        "speedup_tokens_ci_low",
        "speedup_tokens_ci_high",
        "frontier_acceptance",
        "frontier_kl",
    ]
    board = rows[columns].rename(columns={"sampler": "rule"})
    rank = {rule: index for index, rule in enumerate(COLORS)}  # the figures' order of rules
    board = board.assign(rank=board.rule.map(lambda rule: rank.get(rule, len(rank))))
    board = board.sort_values(["task", "rank", "al"]).drop(columns="rank")
    board.to_csv(out_dir / "leaderboard.csv", index=False, float_format="%.4g")
    (out_dir / "leaderboard.definitions.md").write_text(DEFINITIONS)
    (out_dir / "leaderboard.md").write_text(board.to_markdown(index=False, floatfmt=".3g") + "\n")

    figure = score_vs_al_figure(rows, board)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    return save_figure(figure, out_dir / "figures" / "score_vs_al", ("png", "pdf"))


def score_vs_al_figure(rows, board):
    """One panel per task: the score against AL, each rule's arms joined in order of AL, in the
    rule's colour and marker of every other figure; one legend below the panels."""
    tasks = list(board.task.unique())
    figure = Figure(figsize=(6 * len(tasks) + 0.6, 5.4), layout="constrained")
    axes = figure.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks, strict=True):
        part = board[board.task == task]
        for rule, line in part.groupby("rule", sort=False):
            line = line.sort_values("al")
            xerr, x_out = clipped_errors(line.al, line.al_ci_low, line.al_ci_high)
            yerr, y_out = clipped_errors(line.score, line.score_ci_low, line.score_ci_high)
            drawn = ax.errorbar(
                line.al,
                line.score,
                xerr=xerr,
                yerr=yerr,
                marker=MARKERS.get(rule, "o"),
                color=sampler_color(rule),
                markersize=5,
                linewidth=1.2,
                elinewidth=0.7,
                capsize=2,
                label=rule,
            )
            for bars in drawn[2]:  # the interval bars recede; the curves stay readable
                bars.set_alpha(0.35)
            mark_excluded(ax, line.al, line.score, x_out | y_out, sampler_color(rule))
        count = int(part.n_prompts.max())
        ax.set_title(f"{task} ({count} prompts)", fontsize=10)
        ax.set_xlabel(f"AL: accepted drafts per step (m = {part_m(rows, task)}, 95 % interval)")
        ax.set_ylabel("task score (95 % interval)")
        ax.grid(alpha=0.3)
    figure_legend(figure, axes, order=list(COLORS))
    machines = " / ".join(sorted(set(rows.device_name.dropna().astype(str)))) or "device unknown"
    pair = ", ".join(sorted(set(rows.model_pair.astype(str))))
    figure.suptitle(
        f"Every rule: task score against accepted length, {pair}\nmeasured on {machines}",
        fontsize=10,
    )
    describe(figure, rows, pair)  # checkpoints and machine in the files' metadata
    return figure
