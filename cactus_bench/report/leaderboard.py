"""The rules leaderboard's tables and figure, from the runs' CSV alone (`make rules-report`).

    from cactus_bench.report.leaderboard import write_leaderboard
    write_leaderboard(Path("results/rules/rules.csv"), Path("results/rules"),
                      Path("results/frontier/smollm2_135m.csv"))

One row per (rule, parameters, task) of the runs (scripts/rules_board.py runs them), joined with
each arm's exact first-draft acceptance and emitted-law KL(law || q) from the frontier CSV where
the frontier has that arm, and with its task score against SpS's on the same prompts
(leaderboard_power.py): the paired bootstrap of mean(arm) - mean(SpS) over prompts and the
smallest such difference the board's prompt count detects (its MDE).

Writes leaderboard.csv, leaderboard.md, leaderboard.definitions.md and, for each task above the
floor (`at_floor`), figures/leaderboard_<task>.{png,pdf}: one row per arm, grouped by rule
family in the order of COLORS and by AL within a family, with (a) its AL and (b) its score
minus SpS's, each with its 95 % interval. A task at the floor (every score near 0) is a table
in leaderboard.md instead: a panel of it would be a flat line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from cactus_bench.report.batch import rule_label
from cactus_bench.report.claims import GUARDS
from cactus_bench.report.figure_parts import COLORS, save_figure
from cactus_bench.report.leaderboard_figure import leaderboard_figure
from cactus_bench.report.leaderboard_power import (
    FLOOR_SCORE,
    at_floor,
    excluding_zero,
    paired_columns,
    power_sentence,
)
from cactus_bench.report.load import device_names, normalise_device_name
from cactus_bench.store.schema import RENAMED_COLUMNS

# The frontier's parameter label of an arm (frontier/arms.py), to join its exact statistics;
# the cascades, FSD and BiLD read the temperature-1 laws there as in the runs.
FRONTIER_LABEL = {
    "cactus": "delta",
    "cactus_exact": "delta",
    "mentored": "delta",
    "lenience": "l",
    "tas": "eps",
    "ensemble": "alpha",
    **{rule: "alpha" for rule in ("chow", "diff", "opt", "tokenv1", "tokenv2", "tokenv3")},
    "fsd": "T",
    "fsd_reducible": "T",
    "bild": "tau",
    **{"topband": "alpha", "topband_cascade": "beta", "additive": "t", "greedy_margin": "K"},
}  # topband_cascade: the frontier's arms and the board's hold OPT's alpha at 0.5
FRONTIER_PARAM = {"eps": "threshold", "T": "threshold", "t": "acceptance_threshold", "K": "margin"}
FRONTIER_SOURCE = {"gsm8k": "gsm8k_test"}  # the frontier's prompt source of each task
FRONTIER_RULE = {"ensemble": "interp"}  # the alias runs as interp (alpha = 1 - w)

# An arm's label: its numeric parameters under the names docs/rules.md gives them
LABEL_SYMBOLS = {"delta": "δ", "alpha": "α", "tau": "τ", "threshold": "T"}
RULE_SYMBOLS = {"tas": {"threshold": "ε"}, "fly": {"entropy_threshold": "θ", "window": "W"}}

DEFINITIONS = """# Definitions for leaderboard.csv

One row per (rule, parameters, task) of results/rules/rules.csv, the embedded pair (SmolLM2-135M
verifier, its distilled drafter), m and sampling as in the run (scripts/rules_board.py).

- `rule`, `params`: the sampler and its parameters (docs/rules.md); `ensemble` runs as interp
- `label`: the arm as the figure and the tables of leaderboard.md name it (`tas ε=0.09`;
  `ensemble w=0.7` for interp's alpha = 0.3)
- `task`, `n_prompts`: the task and the prompts scored
- `score`, `score_ci_low`, `score_ci_high`: headline task score and its 95 % interval
  (bootstrap over prompts, store/intervals.py)
- `score_diff_sps`, `score_diff_sps_ci_low`, `score_diff_sps_ci_high`: the mean over prompts of
  (this arm's score - SpS's score on the same prompt) and its paired 95 % interval: a percentile
  bootstrap over prompts that resamples both arms together (2,000 resamples drawn by numpy's
  default_rng(0), the same for every arm), so the prompt-to-prompt spread they share cancels.
  Every row of a task must have scored the same prompts in the same order (one `prompts_hash`);
  SpS's own row reads 0 [0, 0]
- `score_mde`: the smallest score difference against SpS the board detects with 80 % power in
  a two-sided paired test at alpha = 0.05 (normal approximation):
  (z_0.975 + z_0.8) * sd / sqrt(n), n the task's prompts and sd the standard deviation of the
  per-prompt differences (arm - SpS), pooled over every arm of the task other than SpS (the
  root of the mean of their sample variances, ddof 1); one value per task. Arms that give SpS's
  answers on every prompt count with a variance of 0. At a task at the floor most differences
  are 0, which shrinks sd: there it speaks of departures from the floor, not of accuracy
- `accept_rate`: accepted drafts / drafted tokens, measured by the engine
- `al`, `al_ci_low`, `al_ci_high`: accepted drafts per verification step (no bonus)
- `speedup_tokens`, `speedup_tokens_ci_low`, `speedup_tokens_ci_high`: tokens/s against the
  verifier alone (the baseline as `baseline_mode` in rules.csv says; on a shared CPU the
  machine's load moves it between runs, so compare acceptance and AL first)
- `speedup_walltime`, `speedup_walltime_ci_low`, `speedup_walltime_ci_high`: the verifier's
  decode time over the arm's on the same prompts: the time to the answers, which a rule whose
  answers run longer loses against its tokens/s
- `length_ratio`, `length_ratio_ci_low`, `length_ratio_ci_high`: λ, the arm's generated tokens
  over the verifier's on the same prompts (speedup_walltime = speedup_tokens / λ); empty for
  rows written before the column existed
- `frontier_acceptance`: the exact mean probability that one draft is accepted, for this arm
  on the frontier's held-out contexts of the task's own source (`acceptance@source=demo` or
  `=gsm8k_test` in results/frontier/<pair>.csv), where the frontier has the arm; empty
  otherwise. It is a first-draft rate: `accept_rate` also counts later drafts, accepted only
  after every earlier one
- `frontier_kl`: the exact mean KL(law || q) of the emitted law for this arm over all the
  frontier's held-out contexts; inf when the law puts mass where q = 0

A task is at the floor when SpS's score has its 95 % upper end below 0.10: every arm then
scores near 0, so leaderboard.md gives it as a table and draws no figure of it.
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


def arm_label(sampler: str, params: str) -> str:
    """`cactus δ=1`, `tas ε=0.09`, `bild τ=5`, `fsd T=0.4`, `ensemble w=0.7` (batch.rule_label
    with the parameters' names of docs/rules.md). TAS's alpha is shown only away from its
    default sqrt(threshold); ensemble, stored as interp's alpha, shows its own w = 1 - alpha."""
    values = json.loads(params) if isinstance(params, str) and params else {}
    hidden: tuple = ()
    if sampler == "tas" and {"alpha", "threshold"} <= set(values):
        if math.isclose(values["alpha"], math.sqrt(values["threshold"]), rel_tol=1e-9):
            hidden = ("alpha",)
    if sampler == "ensemble" and "alpha" in values and "w" not in values:
        values = {"w": round(1.0 - values.pop("alpha"), 9), **values}
    symbols = {**LABEL_SYMBOLS, **RULE_SYMBOLS.get(sampler, {})}
    named = [f" {k}={values[k]}" for k in ("stop", "relax_in") if k in values]  # guards by name
    return rule_label(sampler, json.dumps(values), symbols, hidden) + "".join(named)


LENGTH_BOARD = (
    "speedup_walltime",
    "speedup_walltime_ci_low",
    "speedup_walltime_ci_high",
    "length_ratio",
    "length_ratio_ci_low",
    "length_ratio_ci_high",
)


def write_leaderboard(rows_csv: Path, out_dir: Path, frontier_csv: Path) -> list[Path]:
    """Table, definitions and figures of the runs in rows_csv into out_dir; returns the
    figures' paths."""
    # rows written before the renames (n_samples, speedup) read under today's names
    rows = pd.read_csv(rows_csv).rename(columns=RENAMED_COLUMNS)
    rows = rows[rows.status == "ok"].copy()
    for name in LENGTH_BOARD:  # rows written before the length columns: empty, never 0
        rows[name] = rows[name] if name in rows else math.nan
    rows["device_name"] = rows.device_name.map(normalise_device_name)
    rows["params"] = rows.sampler_params.map(lambda text: json.dumps(json.loads(text)))
    rows["label"] = [arm_label(s, p) for s, p in zip(rows.sampler, rows.params, strict=True)]
    frontier = pd.read_csv(frontier_csv) if frontier_csv.is_file() else None

    def exact(row, statistic):
        params = json.loads(row.sampler_params)
        key = FRONTIER_LABEL.get(row.sampler)
        label = f"{key}={params[FRONTIER_PARAM.get(key, key)]:g}" if key else ""
        rule = FRONTIER_RULE.get(row.sampler, row.sampler)
        if row.sampler == "cactus_exact":
            rule = f"cactus_exact:{params['divergence']}"
        # a guarded run joins its guarded arm (cactus+stop=exact); two guards join none
        rule += "".join(f"+{k}={params[k]}" for k in GUARDS if k in params)
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
    paired, power = paired_columns(rows)
    rows = rows.join(paired)
    columns = [
        "sampler",
        "params",
        "label",
        "task",
        "n_prompts",
        "score",
        "score_ci_low",
        "score_ci_high",
        "score_diff_sps",
        "score_diff_sps_ci_low",
        "score_diff_sps_ci_high",
        "score_mde",
        "accept_rate",
        "al",
        "al_ci_low",
        "al_ci_high",
        "speedup_tokens",
        "speedup_tokens_ci_low",
        "speedup_tokens_ci_high",
        *LENGTH_BOARD,
        "frontier_acceptance",
        "frontier_kl",
    ]
    board = rows[columns].rename(columns={"sampler": "rule"})
    rank = {rule: index for index, rule in enumerate(COLORS)}  # the figures' order of rules
    board = board.assign(rank=board.rule.map(lambda rule: rank.get(rule, len(rank))))
    board = board.sort_values(["task", "rank", "al"], kind="stable").drop(columns="rank")
    board.to_csv(out_dir / "leaderboard.csv", index=False, float_format="%.4g")
    (out_dir / "leaderboard.definitions.md").write_text(DEFINITIONS)

    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for task, part in board.groupby("task", sort=True):
        if not at_floor(part):
            task_rows = rows[rows.task == task]
            figure = leaderboard_figure(task_rows, part, power.get(task), part_m(rows, task))
            paths += save_figure(
                figure, out_dir / "figures" / f"leaderboard_{task}", ("png", "pdf")
            )
    (out_dir / "leaderboard.md").write_text(leaderboard_markdown(rows, board, power))
    return paths


def interval_text(value, low, high, signed: bool = False) -> str:
    """`0.94 [0.83, 1.05]` (`+0.07 [-0.07, +0.20]` signed); the value alone without an
    interval; — without a value."""
    if pd.isna(value):
        return "—"
    number = "{:+.2f}" if signed else "{:.2f}"
    text = number.format(float(value) + 0.0)  # + 0.0: no "-0.00"
    if pd.isna(low) or pd.isna(high):
        return text
    return f"{text} [{number.format(float(low) + 0.0)}, {number.format(float(high) + 0.0)}]"


def arm_table(part: pd.DataFrame) -> str:
    """One line per arm, in the board's order: AL, score and score - SpS's with intervals."""
    lines = [
        "| rule | AL [95 %] | score [95 %] | score - SpS [paired 95 %] |",
        "|---|---:|---:|---:|",
    ]
    for row in part.itertuples():
        al = interval_text(row.al, row.al_ci_low, row.al_ci_high)
        score = interval_text(row.score, row.score_ci_low, row.score_ci_high)
        diff = interval_text(
            row.score_diff_sps, row.score_diff_sps_ci_low, row.score_diff_sps_ci_high, True
        )
        lines.append(f"| {row.label} | {al} | {score} | {diff} |")
    return "\n".join(lines)


def leaderboard_markdown(rows: pd.DataFrame, board: pd.DataFrame, power: dict) -> str:
    """leaderboard.md: per task its figure (or, at the floor, its table instead), its arms'
    table and its power; then every column of leaderboard.csv."""
    pair = ", ".join(sorted(set(rows.model_pair.astype(str))))
    machines = device_names(rows)
    parts = [
        "# Rules leaderboard",
        "",
        f"Pair {pair}, measured on {machines}. Every column: leaderboard.csv (definitions in "
        "leaderboard.definitions.md). Rows: rule families in the figures' order, then AL.",
    ]
    for task, part in board.groupby("task", sort=True):
        m = part_m(rows, task)
        count = int(part.n_prompts.max())
        floor = at_floor(part)
        parts += ["", f"## {task}: {count} prompts, m = {m}{', at the floor' if floor else ''}"]
        if floor:
            sps = part[part.rule == "sps"].iloc[0]
            parts += [
                "",
                f"SpS scores {interval_text(sps.score, sps.score_ci_low, sps.score_ci_high)}: "
                f"the upper end of its 95 % interval is below {FLOOR_SCORE:.2f}, so every arm "
                "scores near 0 and a panel would be a flat line; the table gives the numbers.",
            ]
        else:
            parts += [
                "",
                f"![{task}: AL and score against SpS per arm](figures/leaderboard_{task}.png)",
            ]
        parts += [
            "",
            arm_table(part),
            "",
            excluding_zero(part),
            power_sentence(power.get(task), floor),
        ]
    every = board.drop(columns="params")
    parts += ["", "## Every column", "", every.to_markdown(index=False, floatfmt=".3g")]
    return "\n".join(parts) + "\n"
