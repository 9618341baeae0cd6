"""The paper's Table 1 layout from aggregated results rows (the speedup table: speedup.py).

Table 1 (per model pair and m): rows Verifier, SpS, TAS, Cactus at each δ (then any other
sampler); per task the score (%), AL and Rej. Where the paper published a value, a "paper" row
and an "ours - paper" row follow ours. Where the CSV has them, a cell shows its 95% interval in
brackets and a score carries † / ‡ when it differs significantly from SpS / the verifier on the
same prompts (significance.py). Rendered to Markdown and LaTeX from one `Table` so both always
agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from cactus_bench.report.reference import Reference
from cactus_bench.report.significance import ALPHA, SPS_MARK, VERIFIER_MARK, score_marks
from cactus_bench.store.bootstrap import BOOTSTRAP_RESAMPLES

TASK_TITLES = {"gsm8k": "GSM8K", "ifeval": "IFEval", "gpqa": "GPQA", "demo": "Demo"}
SAMPLER_ORDER = ("verifier", "sps", "tas", "cactus", "cactus_exact", "interp", "topk", "greedy")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "max_new_tokens")

REJ_FOOTNOTE = (
    "Rej = 100 x (r / r_SpS - 1) %, where r = draft tokens rejected / generated tokens of the "
    "method and r_SpS the same for SpS in this block; rejected = drafted - accepted, counting "
    "drafts discarded after the first rejection; both counts summed over prompts and seeds. "
    "Normalising per generated token keeps methods with different output lengths comparable; "
    "it is the measured form of comparing (m - AL) / (AL + 1), with which the paper's Rej "
    "agrees. Negative is better."
)


def is_missing(value) -> bool:
    return value is None or bool(pd.isna(value))


@dataclass
class Table:
    """Renderer-neutral table: grouped header, rows of (label, cells, style), footnotes."""

    title: str
    groups: list[tuple[str, int]]  # (group title, number of columns it spans); "" for none
    columns: list[str]
    rows: list[tuple[str, list[str], str]] = field(default_factory=list)  # style: main|paper|diff
    notes: list[str] = field(default_factory=list)


def task_title(task: str) -> str:
    return TASK_TITLES.get(task, task)


def task_sort_key(task: str) -> tuple:
    """The paper's order (GSM8K, IFEval, GPQA), then the demo, then anything else by name."""
    return (list(TASK_TITLES).index(task) if task in TASK_TITLES else len(TASK_TITLES), task)


def method_label(row) -> str:
    sampler = row["sampler"]

    def num(name: str) -> str:
        return f"{float(row[name]):g}"

    if sampler == "verifier":
        return "Verifier"
    if sampler == "sps":
        return "SpS"
    if sampler == "tas":
        return "TAS" if is_missing(row["threshold"]) else f"TAS (ε = {num('threshold')})"
    if sampler in ("cactus", "cactus_exact"):
        name = "Cactus" if sampler == "cactus" else "Cactus-exact"
        return name if is_missing(row["delta"]) else f"{name} (δ = {num('delta')})"
    if sampler == "interp":
        return "Interp" if is_missing(row["alpha"]) else f"Interp (α = {num('alpha')})"
    if sampler == "topk":
        k = row["top_k_accept"]
        return "Top-k" if is_missing(k) else f"Top-k (k = {int(k)})"
    return sampler.replace("_", " ").capitalize()


def method_sort_key(row) -> tuple:
    sampler = row["sampler"]
    rank = SAMPLER_ORDER.index(sampler) if sampler in SAMPLER_ORDER else len(SAMPLER_ORDER)
    params = [row[k] for k in ("delta", "alpha", "threshold", "top_k_accept")]
    return rank, sampler, tuple(-1.0 if is_missing(v) else float(v) for v in params)


def pair_title(rows: pd.DataFrame, pair: str) -> str:
    spec = rows[rows["sampler"] != "verifier"]
    drafter = spec["drafter_id"].dropna()
    verifier = rows["verifier_id"].dropna()
    if len(drafter) and len(verifier):
        return f"{pair} ({drafter.iloc[0]} → {verifier.iloc[0]})"
    return str(pair)


def blocks(agg: pd.DataFrame):
    """Yield (pair, m, rows) with each pair's verifier rows joined to every m of that pair."""
    agg = agg.copy()
    agg["_sampling"] = [
        tuple(None if is_missing(r[k]) else r[k] for k in SAMPLING_KEYS if k in agg.columns)
        for _, r in agg.iterrows()
    ]
    verifier = agg[agg["sampler"] == "verifier"]
    speculative = agg[agg["sampler"] != "verifier"]
    seen = set()
    for (pair, m, sampling), rows in speculative.groupby(
        ["model_pair", "m", "_sampling"], dropna=False, sort=True
    ):
        joined = verifier[(verifier["model_pair"] == pair) & (verifier["_sampling"] == sampling)]
        seen.update(joined.index)
        yield pair, (None if is_missing(m) else int(m)), pd.concat([joined, rows])
    for (pair, _), rows in verifier.drop(index=list(seen)).groupby(
        ["model_pair", "_sampling"], dropna=False, sort=True
    ):
        yield pair, None, rows  # a pair with only verifier runs


def fmt_number(value, digits: int, suffix: str = "", sign: bool = False) -> str:
    if is_missing(value):
        return "—"
    value = round(float(value), digits) + 0.0  # + 0.0 turns -0.0 into 0.0: no "-0.00"
    return f"{value:{'+' if sign else ''}.{digits}f}{suffix}"


def fmt_interval(row, column: str, digits: int, scale: float = 1.0, suffix: str = "") -> str:
    """`0.56 [0.49, 0.63]` when the row has the column's 95% interval, else `0.56` (or —)."""
    value = row.get(column)
    low, high = row.get(f"{column}_ci_low"), row.get(f"{column}_ci_high")
    if is_missing(value) or low is None or high is None or is_missing(low) or is_missing(high):
        return "—" if is_missing(value) else fmt_number(float(value) * scale, digits, suffix)
    low, high = (fmt_number(float(v) * scale, digits) for v in (low, high))
    return f"{fmt_number(float(value) * scale, digits, suffix)} [{low}, {high}]"


def has_interval(row, column: str) -> bool:
    return not is_missing(row.get(f"{column}_ci_low"))


def interval_note(what: str) -> str:
    return (
        f"Brackets: 95% intervals of {what}, percentile bootstrap over prompts "
        f"({BOOTSTRAP_RESAMPLES} resamples of the prompts with replacement; ratios are ratios of "
        "sums within each resample, like the point estimates); cells averaging several seeds "
        "recompute the score's from the seed-averaged per-prompt scores and average the other "
        "bounds (which errs wide). No brackets: the CSV row has no interval (1 prompt, or "
        "written before intervals existed)."
    )


def _rej_percent(row, sps_row) -> float | None:
    """Rej in percent (REJ_FOOTNOTE); None when a count is missing."""
    if sps_row is None:
        return None
    counts = [
        row["draft_tokens_rejected"],
        row["generated_tokens"],
        sps_row["draft_tokens_rejected"],
        sps_row["generated_tokens"],
    ]
    if any(is_missing(c) for c in counts) or counts[1] == 0 or counts[3] == 0 or counts[2] == 0:
        return None
    rate, sps_rate = counts[0] / counts[1], counts[2] / counts[3]
    return 100.0 * (rate / sps_rate - 1.0)


def table1(agg: pd.DataFrame, reference: Reference | None = None) -> list[Table]:
    """One Table 1 block per (model pair, m, sampling settings)."""
    reference = reference or Reference.empty()
    tables = []
    for pair, m, rows in blocks(agg):
        tasks = sorted(rows["task"].unique(), key=task_sort_key)
        by_method: dict[str, dict[str, pd.Series]] = {}
        order: dict[str, tuple] = {}
        for _, row in rows.iterrows():
            label = method_label(row)
            by_method.setdefault(label, {})[row["task"]] = row
            order[label] = method_sort_key(row)
        sps = by_method.get("SpS", {})
        marks, tests_used, n_tests = score_marks(by_method)
        shown_interval = False
        first = rows.iloc[0]
        sampling = ", ".join(
            f"{k} {first[k]:g}" if isinstance(first[k], float) else f"{k} {first[k]}"
            for k in SAMPLING_KEYS
            if k in rows.columns and not is_missing(first[k])
        )
        table = Table(
            title=f"Table 1 layout: {pair_title(rows, pair)}, m = {m if m else '—'}",
            groups=[("", 1)] + [(task_title(t), 3) for t in tasks],
            columns=["Method"] + [c for _ in tasks for c in ("Score (%)", "AL", "Rej")],
        )
        used_sources: set[str] = set()
        for label in sorted(by_method, key=order.get):
            cells, paper_cells, diff_cells, has_paper = [], [], [], False
            for task in tasks:
                row = by_method[label].get(task)
                if row is None:
                    cells += ["—"] * 3
                    paper_cells += [""] * 3
                    diff_cells += [""] * 3
                    continue
                speculative = row["sampler"] != "verifier"
                rej = _rej_percent(row, sps.get(task)) if label != "SpS" else None
                ours = {
                    "score": None if is_missing(row["score"]) else 100 * float(row["score"]),
                    "al": row["al"] if speculative else None,
                    "rej_pct": rej,
                }
                score_digits = 1 if has_interval(row, "score") else 2
                shown_interval |= has_interval(row, "score") or has_interval(row, "al")
                cells += [
                    fmt_interval(row, "score", score_digits, 100.0) + marks.get((label, task), ""),
                    fmt_interval(row, "al", 2) if speculative else "—",
                    "ref" if label == "SpS" else fmt_number(rej, 1, "%", True),
                ]
                for metric, digits, suffix in (
                    ("score", 2, ""),
                    ("al", 2, ""),
                    ("rej_pct", 0, "%"),
                ):
                    paper = reference.lookup(
                        row["drafter_id"],
                        row["verifier_id"],
                        m,
                        row["sampler"],
                        row["delta"],
                        task,
                        metric,
                    )
                    if paper is None:
                        paper_cells.append("")
                        diff_cells.append("")
                        continue
                    has_paper = True
                    used_sources.add(paper.source)
                    paper_cells.append(fmt_number(paper.value, digits, suffix, metric == "rej_pct"))
                    diff = None if is_missing(ours[metric]) else float(ours[metric]) - paper.value
                    diff_cells.append(
                        fmt_number(
                            diff,
                            2 if metric != "rej_pct" else 1,
                            " pp" if metric != "al" else "",
                            True,
                        )
                    )
            table.rows.append((label, cells, "main"))
            if has_paper:
                table.rows.append(("↳ paper", paper_cells, "paper"))
                table.rows.append(("↳ ours − paper", diff_cells, "diff"))
        table.notes.append(
            "AL = accepted draft tokens per verification step, bonus token not "
            "counted (0..m). " + REJ_FOOTNOTE
        )
        if not sps:
            table.notes.append("No SpS row in this block, so Rej cannot be computed (—).")
        if shown_interval:
            table.notes.append(interval_note("the score (in points) and AL"))
        if n_tests:
            table.notes.append(
                f"{SPS_MARK} / {VERIFIER_MARK}: the score differs from SpS's / the verifier's on "
                f"the same prompts, two-sided {' or '.join(tests_used)} on the per-prompt "
                f"scores (McNemar for 0/1 scores, the permutation test for fractional ones), "
                f"α = {ALPHA:g}, Holm-corrected over the {n_tests} comparisons in this table. No "
                "mark: no significant difference (or no per-prompt scores to pair)."
            )
        names = {
            f"{task_title(r['task'])}: {r['score_name']}"
            for _, r in rows.iterrows()
            if not is_missing(r["score_name"])
        }
        devices = sorted({d for d in rows["device_name"].dropna()})
        runs = int(rows["n_runs"].max())
        table.notes.append(
            f"Score = {'; '.join(sorted(names)) or 'task score'}. Sampling: {sampling or '—'}. "
            f"Device: {' / '.join(devices) or 'unknown'}."
            + (f" Cells average up to {runs} seeds." if runs > 1 else "")
        )
        if used_sources:
            cites = [" ".join(reference.sources[s]["cite"].split()) for s in sorted(used_sources)]
            table.notes.append(
                "Paper values: " + " | ".join(cites) + " (each number's source: "
                "cactus_bench/report/paper_values.yaml)."
            )
        tables.append(table)
    return tables
