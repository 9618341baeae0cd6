"""A step-cost model beside the batch sweep: what a draft step and a verify step cost as the batch
grows, and the speedup those costs predict, set against the measured one.

From the sweep's own step timings (`<stem>.steps.jsonl`, one line per batched run and arm; rows
at batch 1 decode one request at a time, so their per-step costs come from the CSV's phase
times) it fits, by least squares over steps:

    verify_s(rows, fed) = v0 + v1 rows + v2 fed     fed: verifier tokens of the step, all rows
    draft_s(rows)       = d0 + d1 rows              one drafter forward (and draw) of every row
    rule_s(rows)        = r0 + r1 rows              the acceptance rule, or the verifier's draw

and predicts a run's throughput from its per-position acceptance alone: a row gains
E = 1 + sum_j accept_rate_by_pos[j] tokens per step (the bonus or recovered token plus the
surviving drafts), so with B rows a speculative step of m drafts emits B E tokens in
m draft_s(B) + verify_s(B, B (m + 1)) + rule_s(B) seconds, and a verifier step emits B tokens in
verify_s(B, B) + rule_s(B). B is the run's mean rows per decode step (min(batch, prompts) where
no steps were kept); each request also pays its prefill (the run's measured mean per arm).

    predicted speedup = (tokens / spec time) / (tokens / verifier time)

A cost table measured on another device (CSV: device, model, batch, tokens_per_row, seconds;
model "drafter" or "verifier", seconds per forward of `batch` rows of `tokens_per_row` tokens;
and, where `make gpu-bench` measured them, "step_overhead" (a step's work besides the forwards
and the rule, per step: also the verifier's), "draft_overhead" (the same, per draft) and "rule"
(the acceptance rule's verify, per speculative step), each in seconds at `batch` rows) gives a
FORECAST for that device from the same acceptance, labelled as such, with the acceptance's
source and whether the table carried the rule and the overhead (where not, they count 0 and
the step is a lower bound).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class StepCosts:
    """Fitted seconds of one step: verify (v0, v1, v2), draft (d0, d1), rule (r0, r1)."""

    verify: tuple[float, float, float]
    draft: tuple[float, float]
    rule: tuple[float, float]
    device: str = ""
    spec_rule: tuple[float, float] = (0.0, 0.0)  # paid by speculative steps only (a cost table)
    note: str = ""  # what the costs include, where not every part was measured

    def verify_s(self, rows: float, fed: float) -> float:
        return self.verify[0] + self.verify[1] * rows + self.verify[2] * fed

    def draft_s(self, rows: float) -> float:
        return self.draft[0] + self.draft[1] * rows

    def rule_s(self, rows: float) -> float:
        return self.rule[0] + self.rule[1] * rows

    def spec_rule_s(self, rows: float) -> float:
        return self.spec_rule[0] + self.spec_rule[1] * rows


def _fit(design: list[list[float]], target: list[float]) -> tuple[float, ...]:
    """Least squares of target on the design's columns (a constant column included)."""
    solution, *_ = np.linalg.lstsq(np.asarray(design, float), np.asarray(target, float), rcond=None)
    return tuple(float(x) for x in solution)


def step_points(rows: pd.DataFrame, steps: list[dict]) -> dict[str, tuple[list, list]]:
    """{"verify" | "draft" | "rule": (design rows, seconds)} from the batched runs' decode steps
    and, for batch-1 runs, their per-step means from the CSV."""
    points: dict[str, tuple[list, list]] = {k: ([], []) for k in ("verify", "draft", "rule")}

    def add(kind: str, design: list[float], seconds: float) -> None:
        points[kind][0].append(design)
        points[kind][1].append(seconds)

    for line in steps:
        for i, kind in enumerate(line["kind"]):
            if kind != "decode":
                continue
            batch_rows, fed = line["rows"][i], line["fed"][i]
            add("verify", [1.0, batch_rows, fed], line["verify_s"][i])
            add("rule", [1.0, batch_rows], line["rule_s"][i])
            if line["drafts"][i] > 0:
                add("draft", [1.0, batch_rows], line["draft_s"][i] / line["drafts"][i])
    rows = rows[rows.verify_time_s.notna()]  # vLLM times no phase apart: no cost points
    alone = rows[(rows.batch == 1) & (rows.sampler == "verifier") & (rows.num_steps > 0)]
    for row in alone.itertuples():
        add("verify", [1.0, 1.0, 1.0], row.verify_time_s / float(row.num_steps))
    single = rows[(rows.batch == 1) & (rows.sampler != "verifier") & (rows.num_steps > 0)]
    for row in single.itertuples():
        steps_n, m = float(row.num_steps), float(row.m)
        add("verify", [1.0, 1.0, m + 1.0], row.verify_time_s / steps_n)
        add("rule", [1.0, 1.0], row.sampler_time_s / steps_n)
        add("draft", [1.0, 1.0], row.draft_time_s / row.draft_tokens_drafted)
    return points


def fit_costs(rows: pd.DataFrame, steps: list[dict], device: str = "") -> StepCosts:
    points = step_points(rows, steps)
    if min(len(target) for _, target in points.values()) < 3:
        raise ValueError("too few steps to fit the step costs; run experiment=batch_sweep first")
    return StepCosts(
        verify=_fit(*points["verify"]),  # type: ignore[arg-type]
        draft=_fit(*points["draft"]),  # type: ignore[arg-type]
        rule=_fit(*points["rule"]),  # type: ignore[arg-type]
        device=device,
    )


def tokens_per_row_step(accept_rate_by_pos: str) -> float:
    """E = 1 + sum_j of the per-position acceptance (a JSON list; null entries count 0)."""
    return 1.0 + sum(rate or 0.0 for rate in json.loads(accept_rate_by_pos))


def predicted_speedup(
    costs: StepCosts, m: int, rows_per_step: float, tokens_each: float, prefill: tuple
) -> float:
    """Speedup of a run emitting `tokens_each` tokens per row-step at `rows_per_step` rows, with
    (speculative, verifier) prefill seconds per request and per generated token in `prefill`."""
    spec_step = m * costs.draft_s(rows_per_step) + costs.verify_s(
        rows_per_step, rows_per_step * (m + 1)
    )
    spec_step += costs.rule_s(rows_per_step) + costs.spec_rule_s(rows_per_step)
    base_step = costs.verify_s(rows_per_step, rows_per_step) + costs.rule_s(rows_per_step)
    spec_per_token = spec_step / (rows_per_step * tokens_each) + prefill[0]
    base_per_token = base_step / rows_per_step + prefill[1]
    return base_per_token / spec_per_token


def _mean_rows(steps: list[dict], run_id: str) -> float | None:
    decode = [
        r
        for line in steps
        if line["run_id"] == run_id and line["arm"] == "spec"
        for r, kind in zip(line["rows"], line["kind"], strict=True)
        if kind == "decode"
    ]
    return float(np.mean(decode)) if decode else None


def predictions(rows: pd.DataFrame, steps: list[dict], costs: StepCosts) -> pd.DataFrame:
    """Measured against predicted speedup for every speculative row with its acceptance."""
    out = []
    speculative = rows[(rows.sampler != "verifier") & rows.accept_rate_by_pos.notna()]
    for row in speculative.itertuples():
        batch_rows = _mean_rows(steps, row.run_id) or float(min(row.batch, row.n_prompts))
        tokens = float(row.generated_tokens)
        prefill = (
            row.prefill_time_s / tokens,
            _baseline_prefill(rows, row) / float(row.baseline_generated_tokens),
        )
        predicted = predicted_speedup(
            costs, int(row.m), batch_rows, tokens_per_row_step(row.accept_rate_by_pos), prefill
        )
        out.append(
            {
                "task": row.task,
                "rule": row.rule,
                "m": int(row.m),
                "batch": int(row.batch),
                "measured": row.speedup_tokens,
                "measured_ci_low": row.speedup_tokens_ci_low,
                "measured_ci_high": row.speedup_tokens_ci_high,
                "predicted": predicted,
                "gap": predicted / row.speedup_tokens - 1.0,
            }
        )
    return pd.DataFrame(out)


def _baseline_prefill(rows: pd.DataFrame, row) -> float:
    """The verifier's prefill seconds of the run's requests: the verifier-only row at the same
    batch (its own prefill column), else the speculative run's half (two models prefilled)."""
    alone = rows[(rows.sampler == "verifier") & (rows.batch == row.batch) & (rows.task == row.task)]
    if len(alone) and pd.notna(alone.prefill_time_s.iloc[0]):
        return float(alone.prefill_time_s.iloc[0])
    return float(row.prefill_time_s) / 2


def load_steps(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


OVERHEADS = ("step_overhead", "draft_overhead", "rule")  # a cost table's optional models


def costs_from_table(table: pd.DataFrame) -> StepCosts:
    """StepCosts from another device's cost table (module docstring): the drafter's forward
    plus its per-draft overhead make a draft, the per-step overhead is paid by both arms (as
    `rule_s`), the rule by speculative steps; a part the table lacks counts 0, named in `note`."""
    verifier = table[table.model == "verifier"]
    design = [[1.0, b, b * t] for b, t in zip(verifier.batch, verifier.tokens_per_row, strict=True)]
    verify = _fit(design, list(verifier.seconds))
    draft = _batch_fit(table[table.model == "drafter"])
    parts = {name: _batch_fit(table[table.model == name]) for name in OVERHEADS}
    draft = (draft[0] + parts["draft_overhead"][0], draft[1] + parts["draft_overhead"][1])
    missing = [name for name in OVERHEADS if not (table.model == name).any()]
    note = f"not in the cost table, counted 0: {', '.join(missing)}" if missing else ""
    device = " / ".join(sorted(set(table.device.astype(str))))
    return StepCosts(verify, draft, parts["step_overhead"], device, parts["rule"], note)


def _batch_fit(rows: pd.DataFrame) -> tuple[float, float]:
    """(a, b) of seconds = a + b batch over the rows: (0, 0) without rows, a constant from one
    batch."""
    if rows.empty:
        return 0.0, 0.0
    if rows.batch.nunique() == 1:
        return float(rows.seconds.mean()), 0.0
    a, b = _fit([[1.0, batch] for batch in rows.batch], list(rows.seconds))
    return a, b


def forecast(
    chosen: pd.DataFrame, costs: StepCosts, batches: list[int], source: str = ""
) -> pd.DataFrame:
    """FORECAST speedups on the cost table's device, from each rule's measured acceptance at
    its smallest batch (acceptance is a property of the laws, not of the device); prefill left
    out. Each row names its acceptance's source (`source`: the sweep it came from) and what
    the step costs leave out (`costs.note`)."""
    out = []
    first = chosen.sort_values("batch").drop_duplicates(["task", "rule", "m"])
    for row in first.itertuples():
        each = tokens_per_row_step(row.accept_rate_by_pos)
        pair = f"{getattr(row, 'drafter_id', '?')} -> {getattr(row, 'verifier_id', '?')}"
        setting = f"task {row.task}, m = {row.m}, batch {row.batch}"
        accepted = f"{source or 'the sweep'}: {pair}, {setting}"
        for batch in batches:
            out.append(
                {
                    "device": costs.device,
                    "kind": "forecast",
                    "task": row.task,
                    "rule": row.rule,
                    "m": int(row.m),
                    "batch": batch,
                    "forecast_speedup": predicted_speedup(costs, int(row.m), batch, each, (0, 0)),
                    "acceptance_source": accepted,
                    "costs_note": costs.note or "forwards, rule and overhead measured",
                }
            )
    return pd.DataFrame(out)
