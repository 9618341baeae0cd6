"""The batch sweep's page and files (`make batch-report`): batch.md (the table of speedups per
batch, the crossovers, the step-cost model's predicted-vs-measured table), the CSVs beside it and
the figure; batch.py chooses the rows they show.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from cactus_bench.report.batch import (
    SELECTION_TASK,
    SPEEDUP_COLUMNS,
    best_m,
    crossover,
    how_m_was_chosen,
    sweep_rows,
)
from cactus_bench.report.batch_cost import (
    costs_from_table,
    fit_costs,
    forecast,
    load_steps,
    predictions,
)
from cactus_bench.report.batch_figure import figure
from cactus_bench.report.figure_parts import save_figure
from cactus_bench.report.load import device_names
from cactus_bench.report.speedup import DRIFT_NOTE, drift_mark


def _cell(row: pd.Series) -> str:
    if pd.isna(row.speedup_tokens):
        return "—"
    low, high = row.speedup_tokens_ci_low, row.speedup_tokens_ci_high
    interval = "" if pd.isna(low) else f" [{low:.2f}, {high:.2f}]"
    text = f"{row.speedup_tokens:.2f}x{interval} (m={int(row.m)}){drift_mark(row)}"
    return text + _length_cell(row)


def _length_cell(row: pd.Series) -> str:
    """`; wall 0.99x, λ 1.14` where the row measured its answers' length (store/length.py): the
    time to the answers beside the tokens/s ratio; rows written before λ show the ratio alone."""
    ratio = row.get("length_ratio")
    if ratio is None or pd.isna(ratio):
        return ""
    return f"; wall {row.speedup_walltime:.2f}x, λ {ratio:.2f}"


def markdown_table(rows: pd.DataFrame, chosen: pd.DataFrame, crossing: pd.DataFrame) -> str:
    """Per task: the verifier's throughput per batch, then each rule's speedup (best m) per
    batch, its score at batch 1 and its crossover batch."""
    batches = sorted(rows.batch.unique())
    devices = device_names(rows)
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


def cost_section(rows: pd.DataFrame, chosen: pd.DataFrame, csv: Path, out: Path, table) -> tuple:
    """The step-cost model's predicted-vs-measured table (and a forecast from another device's
    cost table): (markdown, written paths)."""
    kept = set(rows.run_id)  # steps of rows no longer in the CSV (discarded runs) stay out
    steps = [s for s in load_steps(csv.with_name(csv.stem + ".steps.jsonl")) if s["run_id"] in kept]
    if not steps and rows.verify_time_s.isna().all():
        note = "No step-cost model: these rows time no draft, verify or rule phase apart (vLLM)."
        return f"## Step-cost model (report/batch_cost.py)\n\n{note}", []
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
        ahead = forecast(chosen, other, sorted(pd.read_csv(table).batch.unique()), str(csv))
        written.append(out / "batch_forecast.csv")
        ahead.to_csv(written[-1], index=False)
        lines += [
            "",
            f"FORECAST on {other.device} from {table} (not measured). Acceptance: each rule's "
            f"as measured in {csv} at its smallest batch, on that sweep's pair and machine "
            f"(batch_forecast.csv names each). Step costs: "
            f"{other.note or 'forwards, rule and overhead, all from the table'}.",
            "",
        ]
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
