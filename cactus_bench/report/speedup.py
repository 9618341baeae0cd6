"""The speedup table: tokens/s of both arms, the two speedup forms and the answers' length (λ,
the cap-out share) that separates them, with 95% intervals."""

from __future__ import annotations

import pandas as pd

from cactus_bench.report.reference import Reference
from cactus_bench.report.tables import (
    Table,
    blocks,
    fmt_interval,
    fmt_number,
    has_interval,
    is_missing,
    method_label,
    method_sort_key,
    pair_title,
    task_sort_key,
    task_title,
)
from cactus_bench.store.bootstrap import BOOTSTRAP_RESAMPLES

DRIFT_MARK = " (drift)"  # † and ‡ already mark score differences
DRIFT_NOTE = (
    "(drift): drift_marked: the machine's speed moved during the run by more than its "
    "drift_threshold (an arm's step rate, second half of its waves against the first), so its "
    "timings are suspect; rerun it on a quieter machine."
)


def drift_mark(row) -> str:
    """` (drift)` for a row (or a cell of rows) marked for drift, else ""."""
    marked = row.get("drift_marked")
    return DRIFT_MARK if not is_missing(marked) and bool(marked) else ""


def cap_out_cell(row) -> str:
    """`55.3% (+13.1 [+8.9, +17.2])`: the share and its paired difference from the baseline."""
    share, diff = row.get("cap_out_share"), row.get("cap_out_diff")
    if is_missing(share):
        return "—"
    text = f"{100 * share:.1f}%"
    if is_missing(diff):
        return text
    low, high = row.get("cap_out_diff_ci_low"), row.get("cap_out_diff_ci_high")
    bounds = "" if is_missing(low) else f" [{100 * low:+.1f}, {100 * high:+.1f}]"
    return f"{text} ({100 * diff:+.1f}{bounds})"


def speedup_table(agg: pd.DataFrame, reference: Reference | None = None) -> list[Table]:
    """Per (pair, m): tokens/s of both arms, tokens/s speedup, wall-time speedup, device."""
    reference = reference or Reference.empty()
    tables = []
    for pair, m, rows in blocks(agg):
        rows = rows[rows["sampler"] != "verifier"]
        if rows.empty:
            continue
        table = Table(
            title=f"Speedup over the verifier alone: {pair_title(rows, pair)}, m = {m}",
            groups=[],
            columns=[
                "Task",
                "Method",
                "tokens/s (method)",
                "tokens/s (verifier)",
                "speedup (tokens/s)",
                "speedup (wall time)",
                "λ (length)",
                "ends on budget",
                "paper (wall time)",
                "baseline",
            ],
        )
        ordered = sorted(
            (r for _, r in rows.iterrows()),
            key=lambda r: (task_sort_key(r["task"]), method_sort_key(r)),
        )
        for row in ordered:
            paper = reference.lookup(
                row["drafter_id"],
                row["verifier_id"],
                m,
                row["sampler"],
                row["delta"],
                row["task"],
                "speedup_walltime",
            )
            paper_text = (
                ""
                if paper is None
                else (f"{'~' if paper.approximate else ''}{paper.value:.2f}x ({paper.device})")
            )
            table.rows.append(
                (
                    task_title(row["task"]),
                    [
                        method_label(row),
                        fmt_number(row["tokens_per_s_spec"], 2),
                        fmt_number(row["tokens_per_s_baseline"], 2),
                        fmt_interval(row, "speedup_tokens", 2, suffix="x") + drift_mark(row),
                        fmt_interval(row, "speedup_walltime", 2, suffix="x") + drift_mark(row),
                        fmt_interval(row, "length_ratio", 3),
                        cap_out_cell(row),
                        paper_text,
                        "—" if is_missing(row["baseline_mode"]) else str(row["baseline_mode"]),
                    ],
                    "main",
                )
            )
        if any(drift_mark(r) for r in ordered):
            table.notes.append(DRIFT_NOTE)
        devices = sorted({d for d in rows["device_name"].dropna()})
        if any(has_interval(r, c) for r in ordered for c in ("speedup", "speedup_walltime")):
            table.notes.append(
                "Brackets: 95% intervals, percentile bootstrap over prompts with the method "
                f"and its verifier baseline resampled together ({BOOTSTRAP_RESAMPLES} paired "
                "resamples): a prompt slow for both arms moves both, so its spread cancels in "
                "the ratio; within a resample each speedup is a ratio of sums, like the point "
                "estimate. Cells averaging several seeds show the mean of the per-seed bounds "
                "(errs wide)."
            )
        table.notes.append(
            f"Device: {' / '.join(devices) or 'unknown'}. speedup (tokens/s) = generated tokens "
            "per second of the method / of the verifier-only baseline on the same prompts; "
            "speedup (wall time) = total decode time of the baseline / of the method, the time "
            "to the same prompts' answers. λ = the method's generated tokens / the baseline's on "
            "the same prompts (paired 95% interval), so speedup (wall time) = speedup "
            "(tokens/s) / λ: a rule whose answers run longer is slower to the answer than its "
            "tokens/s say. ends on budget: the share of answers that ran into the token budget, "
            "and its paired difference from the baseline's in points. — means no baseline was "
            "measured (baseline=none) or a row written before these columns existed. The paper "
            "timed vLLM on an A100 40GB; timings on other hardware or backends are not comparable "
            "to it."
        )
        tables.append(table)
    return tables
