"""Speedup against batch size (experiment=batch_sweep): a table, the crossover batch of each rule,
and a figure, from the runs' CSV alone (`make batch-report`).

    from cactus_bench.report.batch import write_batch_report
    write_batch_report(Path("results/batch/batch_sweep.csv"), Path("results/batch"))

Each row of the sweep is one (task, rule with its parameters, batch, m) run whose speedup is its
throughput (generated tokens per second over the run) against the verifier alone at the same
batch on the same requests, with the run's paired bootstrap interval over prompts. Per (task,
rule, batch) the report keeps the m with the highest speedup ("m chosen per batch"), which is
optimistic by the choice itself; every m stays in batch_all_m.csv. On every other task (the
held-out IFEval slice) each (rule, batch) runs only at the m the selection task chose
(`heldout_jobs` lists those runs), so its speedups carry no choice of their own. The crossover
batch of a rule is the smallest swept batch at which its chosen speedup's interval lies wholly
below 1, or "none up to <largest batch>".
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from cactus_bench.report.batch_cost import (
    costs_from_table,
    fit_costs,
    forecast,
    load_steps,
    predictions,
)
from cactus_bench.report.figure_parts import (
    clipped_errors,
    figure_legend,
    mark_excluded,
    sampler_color,
    save_figure,
)
from cactus_bench.report.load import load_results
from cactus_bench.report.speedup import DRIFT_NOTE, drift_mark

SPEEDUP_COLUMNS = ("speedup_tokens", "speedup_tokens_ci_low", "speedup_tokens_ci_high")
SELECTION_TASK = "demo"  # the task whose sweep over m chooses m for every task


def rule_label(
    sampler: str, params: object, symbols: dict | None = None, hidden: tuple = ()
) -> str:
    """`cactus δ=1` from the sampler and its params JSON: its numeric parameters, each under
    its name in `symbols` (default: delta as δ), less those in `hidden` (test_law, the default,
    is never shown)."""
    if not isinstance(params, str) or not params:
        return str(sampler)
    symbols = {"delta": "δ"} if symbols is None else symbols
    values = {k: v for k, v in json.loads(params).items() if k != "test_law" and k not in hidden}
    shown = " ".join(f"{symbols.get(k, k)}={v:g}" for k, v in values.items() if _num(v))
    return f"{sampler} {shown}".strip()


def _num(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sweep_rows(csv: Path) -> pd.DataFrame:
    """The sweep's finished rows with a `rule` label and the batch (1 where a row lacks it)."""
    rows = load_results([csv])
    rows = rows[rows["status"] == "ok"].copy()
    rows["batch"] = rows["batch"].fillna(1).astype(int)
    rows["rule"] = [
        rule_label(s, p) for s, p in zip(rows.sampler, rows.sampler_params, strict=True)
    ]
    return rows


def best_m(rows: pd.DataFrame, selection_task: str | None = None) -> pd.DataFrame:
    """Per (task, rule, batch): the speculative row of the highest speedup over its m's; with
    `selection_task` swept, every other task's row at the m that task chose (held out)."""
    speculative = rows[(rows.sampler != "verifier") & rows.speedup_tokens.notna()]
    order = speculative.sort_values("speedup_tokens", ascending=False)
    chosen = order.drop_duplicates(["task", "rule", "batch"])
    if selection_task in set(chosen.task):
        selected = chosen[chosen.task == selection_task]
        held_out = order[order.task != selection_task].merge(
            selected[["rule", "batch", "m"]], on=["rule", "batch", "m"]
        )
        chosen = pd.concat([selected, held_out.drop_duplicates(["task", "rule", "batch"])])
    return chosen.sort_values(["task", "rule", "batch"])


def heldout_jobs(rows: pd.DataFrame, selection_task: str = SELECTION_TASK) -> list[list[str]]:
    """run.py overrides for a held-out task: per (rule, batch) the selection task's chosen m,
    and the verifier alone per batch (its rows carry the throughput and the score)."""
    chosen = best_m(rows, selection_task)
    chosen = chosen[chosen.task == selection_task]
    if chosen.empty:
        raise ValueError(
            f"no finished {selection_task} rows to choose m from; run "
            f"`python run.py experiment=batch_sweep` first"
        )
    # the verifier alone ignores m; naming one value keeps the sweep from launching it per m
    jobs = [["sampler=verifier", f"batch={b}", "m=1"] for b in sorted(chosen.batch.unique())]
    for row in chosen.itertuples():
        params = json.loads(row.sampler_params) if isinstance(row.sampler_params, str) else {}
        given = [f"sampler={row.sampler}"]
        for key, value in sorted(params.items()):
            # delta through its shortcut (the sampler presets read it); the rest by their key
            given.append(f"delta={value}" if key == "delta" else f"sampler.{key}={value}")
        jobs.append([*given, f"batch={int(row.batch)}", f"m={int(row.m)}"])
    return jobs


def crossover(chosen: pd.DataFrame, batches: list[int]) -> pd.DataFrame:
    """Per (task, rule): the smallest batch whose speedup interval lies below 1, or none."""
    out = []
    for (task, rule), line in chosen.groupby(["task", "rule"], sort=True):
        below = line[line.speedup_tokens_ci_high < 1].batch
        found = int(below.min()) if len(below) else None
        out.append(
            {
                "task": task,
                "rule": rule,
                "crossover_batch": found,
                "says": f"batch {found}" if found else f"none up to {max(batches)}",
            }
        )
    return pd.DataFrame(out)


def how_m_was_chosen(task: str, rows: pd.DataFrame) -> str:
    if task == SELECTION_TASK or SELECTION_TASK not in set(rows.task):
        return "best m per batch (chosen on these rows)"
    return f"the m {SELECTION_TASK} chose per batch (held out)"


def _cell(row: pd.Series) -> str:
    if pd.isna(row.speedup_tokens):
        return "—"
    low, high = row.speedup_tokens_ci_low, row.speedup_tokens_ci_high
    interval = "" if pd.isna(low) else f" [{low:.2f}, {high:.2f}]"
    return f"{row.speedup_tokens:.2f}x{interval} (m={int(row.m)}){drift_mark(row)}"


def markdown_table(rows: pd.DataFrame, chosen: pd.DataFrame, crossing: pd.DataFrame) -> str:
    """Per task: the verifier's throughput per batch, then each rule's speedup (best m) per
    batch, its score at batch 1 and its crossover batch."""
    batches = sorted(rows.batch.unique())
    devices = " / ".join(sorted(set(rows.device_name.dropna()))) or "device unknown"
    lines = [f"Timed on {devices}; speedup = throughput / the verifier's at the same batch.", ""]
    for task, part in chosen.groupby("task", sort=True):
        # the verifier's throughput as each rule's paired baseline measured it (median over the
        # rules at that batch): decoded right after the rule's own arm, on the same requests
        paired = rows[(rows.task == task) & rows.tokens_per_s_baseline.notna()]
        alone = paired.groupby("batch").tokens_per_s_baseline.median()
        lines += [f"## {task}", "", f"m: {how_m_was_chosen(task, rows)}.", ""]
        head = ["rule", *[f"batch {b}" for b in batches], "score (batch 1)", "crossover"]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        throughput = [f"{alone[b]:.1f} tok/s" if b in alone.index else "—" for b in batches]
        lines.append(
            "| verifier alone (median of the paired baselines) | "
            + " | ".join(throughput)
            + " | | |"
        )
        for rule, line in part.groupby("rule", sort=True):
            by_batch = line.set_index("batch")
            cells = [_cell(by_batch.loc[b]) if b in by_batch.index else "—" for b in batches]
            first = line[line.batch == line.batch.min()].iloc[0]
            score = "—" if pd.isna(first.score) else f"{100 * first.score:.1f}"
            says = crossing[(crossing.task == task) & (crossing.rule == rule)].says.iloc[0]
            lines.append(f"| {rule} | " + " | ".join(cells) + f" | {score} | {says} |")
        lines.append("")
    if any(drift_mark(row) for _, row in chosen.iterrows()):
        lines += [DRIFT_NOTE, ""]
    return "\n".join(lines)


def labels(ax) -> list[str]:
    return [artist.get_label() for artist in ax.collections]


def figure(rows: pd.DataFrame, chosen: pd.DataFrame) -> Figure:
    """Per task: speedup against batch per rule (best m, 95 % intervals, 1x line) and, beside
    it, each rule's score at batch 1 with its interval."""
    tasks = sorted(chosen.task.unique())
    devices = " / ".join(sorted(set(rows.device_name.dropna()))) or "device unknown"
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


def cost_section(rows: pd.DataFrame, chosen: pd.DataFrame, csv: Path, out: Path, table) -> tuple:
    """The step-cost model's predicted-vs-measured table (and a forecast from another device's
    cost table): (markdown, written paths)."""
    kept = set(rows.run_id)  # steps of rows no longer in the CSV (discarded runs) stay out
    steps = [s for s in load_steps(csv.with_name(csv.stem + ".steps.jsonl")) if s["run_id"] in kept]
    costs = fit_costs(rows, steps)
    compared = predictions(rows, steps, costs)
    written = [out / "batch_cost.csv"]
    compared.to_csv(written[0], index=False)
    best = compared.merge(chosen[["task", "rule", "batch", "m"]], on=["task", "rule", "batch", "m"])
    lines = [
        "## Step-cost model (report/batch_cost.py)",
        "",
        "Fitted milliseconds per step: "
        f"verify = {1e3 * costs.verify[0]:.2f} + {1e3 * costs.verify[1]:.2f} rows + "
        f"{1e3 * costs.verify[2]:.2f} tokens; one draft forward = {1e3 * costs.draft[0]:.2f} + "
        f"{1e3 * costs.draft[1]:.2f} rows; rule = {1e3 * costs.rule[0]:.2f} + "
        f"{1e3 * costs.rule[1]:.2f} rows.",
        f"Predicted against measured speedup, every row: within 10 % in "
        f"{int((compared.gap.abs() <= 0.10).sum())} of {len(compared)}; largest gap "
        f"{compared.gap.abs().max():.0%}. Best m per batch:",
        "",
        "| task | rule | batch | m | measured | predicted | gap |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in best.sort_values(["task", "rule", "batch"]).itertuples():
        lines.append(
            f"| {row.task} | {row.rule} | {row.batch} | {row.m} | {row.measured:.2f}x "
            f"[{row.measured_ci_low:.2f}, {row.measured_ci_high:.2f}] | {row.predicted:.2f}x | "
            f"{row.gap:+.0%} |"
        )
    if table is not None:
        other = costs_from_table(pd.read_csv(table))
        ahead = forecast(chosen, other, sorted(pd.read_csv(table).batch.unique()))
        written.append(out / "batch_forecast.csv")
        ahead.to_csv(written[-1], index=False)
        lines += ["", f"FORECAST on {other.device} from {table} (not measured):", ""]
        pivot = ahead.pivot_table("forecast_speedup", ["task", "rule", "m"], "batch")
        lines.append(pivot.round(2).to_markdown())
    return "\n".join(lines), written


def write_batch_report(
    csv: Path, out: Path, formats=("png", "pdf"), cost_table: Path | None = None
) -> list[Path]:
    """batch_all_m.csv, batch_best_m.csv, batch.md (table, crossover, step-cost model), the
    predicted-vs-measured CSV and the figure; with `cost_table`, a forecast for its device."""
    rows = sweep_rows(csv)
    if rows.empty:
        raise ValueError(f"{csv} has no finished rows; run `python run.py experiment=batch_sweep`")
    chosen = best_m(rows, SELECTION_TASK)
    crossing = crossover(chosen, sorted(rows.batch.unique()))
    out.mkdir(parents=True, exist_ok=True)
    keep = ["task", "rule", "batch", "m", *SPEEDUP_COLUMNS, "tokens_per_s_spec"]
    keep += ["tpot_median_s", "tpot_p90_s", "score", "score_ci_low", "score_ci_high", "al"]
    written = [out / "batch_all_m.csv", out / "batch_best_m.csv", out / "batch.md"]
    rows.sort_values(["task", "rule", "batch", "m"])[keep].to_csv(written[0], index=False)
    chosen[keep].to_csv(written[1], index=False)
    text = markdown_table(rows, chosen, crossing)
    cost_text, cost_files = cost_section(rows, chosen, csv, out, cost_table)
    written[2].write_text(
        f"# Speedup against batch size\n\n{text}\n{cost_text}\n", encoding="utf-8"
    )
    written += cost_files
    (out / "figures").mkdir(exist_ok=True)
    written += save_figure(figure(rows, chosen), out / "figures" / "speedup_vs_batch", formats)
    return written
