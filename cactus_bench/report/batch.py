"""Speedup against batch size (experiment=batch_sweep): a table, the crossover batch of each rule,
and a figure, from the runs' CSV alone (`make batch-report`).

    from cactus_bench.report.batch_page import write_batch_report
    write_batch_report(Path("results/batch/batch_sweep.csv"), Path("results/batch"))

This file chooses the rows (the m per batch, the crossover); batch_page.py writes the page and
its CSVs, batch_figure.py draws the figure, batch_cost.py fits the step-cost model.

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

from cactus_bench.report.load import load_results

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
    unset = pd.Series(None, index=rows.index, dtype=object)  # columns older CSVs lack
    backend = rows.get("backend", unset).fillna("hf")
    acceptance = rows.get("acceptance", unset).fillna("rule")
    engines = sorted({f"{b}/{a}" for b, a in zip(backend, acceptance, strict=True)})
    if len(engines) > 1:  # one rule's rows of two engines would share a (task, rule, batch) cell
        raise ValueError(
            f"{csv} mixes engines ({', '.join(engines)}; backend/acceptance): the batch page "
            "compares one engine's rules; give each engine its own results_dir"
        )
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
