"""95% intervals for a results row: a paired percentile bootstrap over prompts.

The prompts are the sampling unit: a run's numbers would move mostly because a different set of
prompts was drawn, so each resample draws n prompts with replacement (all repeats of a drawn
prompt come along) and recomputes every statistic the way the row's point estimate is computed:

    al               = sum(accepted) / sum(steps)              ratio of sums, not mean of ratios
    tokens_per_step  = sum(emitted) / sum(steps)
    speedup_tokens   = (sum(gen) / sum(time)) / (sum(gen_base) / sum(time_base))
    speedup_walltime = sum(time_base) / sum(time)
    tokens_per_s_spec = sum(gen) / sum(time)                   time: each request's machine time
    tpot_median_s / tpot_p90_s = quantiles over the resampled prompts' requests of each request's
                       time per output token (its wall time / its generated tokens)
    score            = mean over prompts of the per-prompt score (averaged over repeats)
    accept_rate_by_pos[j] = sum(steps accepting position j) / sum(steps drafting position j)

The per-position intervals are lists (one entry per draft position, like accept_rate_by_pos),
so they have their own column names (POSITION_INTERVAL_COLUMNS) beside the scalar ones.

Paired: the run's decoder and its verifier-only baseline use the SAME resamples, so the
prompt-to-prompt spread (long prompts are slow for both arms) cancels in the speedup instead of
widening it. At batch > 1 the timing statistics (tokens_per_s_spec, the speedups, the latency
quantiles) resample by WAVE (store/drift.py): each resample draws as many waves as the run
has, with replacement, and within each drawn wave as many of its prompts, with replacement
(`wave_resample_counts`, a two-stage bootstrap). Both arms of a wave decoded the same requests
back to back, so a wave is the unit that shares a machine state, and a request's time is a
share of its wave's. At batch 1 a wave is one prompt and the prompt bootstrap is kept.
The interval is bootstrap.py's percentile interval of the BOOTSTRAP_RESAMPLES resampled values,
from a fixed stream derived from the run seed, so a row is reproducible.
A row with fewer than 2 prompts, or a statistic undefined on some resample (a zero denominator),
gets empty interval cells, never a zero-width interval.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from cactus_bench.store.baseline_cache import prompts_hash
from cactus_bench.store.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    bootstrap_rng,
    percentile_interval,
    resample_counts,
    safe_ratio,
    wave_resample_counts,
)
from cactus_bench.store.drift import prompt_waves
from cactus_bench.store.length import (
    LENGTH_COLUMNS,
    diagnostic_columns,
    length_columns,
)
from cactus_bench.store.summarise import machine_time

INTERVAL_STATS = (
    "score",
    "al",
    "tokens_per_step",
    "tokens_per_s_spec",
    "speedup_tokens",
    "speedup_walltime",
    "tpot_median_s",
    "tpot_p90_s",
)
LATENCY_QUANTILES = {"tpot_median_s": 0.5, "tpot_p90_s": 0.9}
# resampled by wave at batch > 1 (the latency quantiles too): what the machine's state sets
TIMED = ("tokens_per_s_spec", "speedup_tokens", "speedup_walltime")
ENDS = ("low", "high")
# JSON lists of m entries, a None where the position's rate is undefined on some resample
POSITION_INTERVAL_COLUMNS = ("accept_rate_by_pos_ci_low", "accept_rate_by_pos_ci_high")


def interval_column_names() -> list[str]:
    return [f"{stat}_ci_{end}" for stat in INTERVAL_STATS for end in ("low", "high")]


def _get(record, name: str):
    return record[name] if isinstance(record, Mapping) else getattr(record, name)


def per_prompt_totals(records: Sequence, n_prompts: int) -> dict[str, np.ndarray]:
    """Sums per prompt over its repeats. Record i belongs to prompt i % n_prompts (evaluate_task
    decodes the whole prompt list once per repeat, in the same order).

    Each value is [n_prompts], except drafted_by_pos / accepted_by_pos: [n_prompts, m], the steps
    that drafted / accepted draft position j (summarise's counts, per prompt)."""
    if n_prompts < 1 or len(records) % n_prompts:
        raise ValueError(
            f"{len(records)} records do not split into repeats of {n_prompts} prompts; pass the "
            "records of evaluate_task in order"
        )
    m = max((int(_get(r, "num_draft_tokens")) for r in records), default=0)
    totals = {k: np.zeros(n_prompts) for k in ("accepted", "steps", "emitted", "gen", "time")}
    totals |= {k: np.zeros((n_prompts, m)) for k in ("drafted_by_pos", "accepted_by_pos")}
    position = np.arange(m)  # [m] 0-based draft positions
    for index, record in enumerate(records):
        prompt = index % n_prompts
        accepted = _get(record, "accepted_per_step")
        totals["accepted"][prompt] += sum(accepted)
        totals["steps"][prompt] += len(accepted)
        totals["emitted"][prompt] += sum(_get(record, "emitted_per_step"))
        totals["gen"][prompt] += len(_get(record, "output_ids"))
        totals["time"][prompt] += machine_time(record)
        if m:  # position j is drafted by a step drafting > j tokens, accepted if it accepts > j
            drafted = np.asarray(_get(record, "drafted_per_step"), dtype=int)  # [steps]
            taken = np.asarray(accepted, dtype=int)  # [steps]
            totals["drafted_by_pos"][prompt] += (drafted[:, None] > position).sum(axis=0)
            totals["accepted_by_pos"][prompt] += (taken[:, None] > position).sum(axis=0)
    return totals


def bootstrap_intervals(
    counts: np.ndarray,
    spec: dict[str, np.ndarray] | None,
    base: dict[str, np.ndarray] | None,
    scores: np.ndarray | None,
    speculative: bool,
) -> dict:
    """Interval columns from per-prompt totals and ONE shared [B, n] resample-count matrix:
    floats (or None) for the scalar statistics, lists of m for the per-position ones."""
    out: dict = dict.fromkeys([*interval_column_names(), *POSITION_INTERVAL_COLUMNS])

    def put(stat: str, values: np.ndarray) -> None:
        out[f"{stat}_ci_low"], out[f"{stat}_ci_high"] = percentile_interval(values)

    # the [n] totals; the [n, m] per-position ones are summed apart (_position_intervals)
    per_prompt = {f"spec_{k}": v for k, v in (spec or {}).items() if np.ndim(v) == 1}
    per_prompt |= {f"base_{k}": v for k, v in (base or {}).items() if np.ndim(v) == 1}
    if scores is not None:
        per_prompt["score"] = np.asarray(scores, dtype=float)
    if not per_prompt:
        return out
    names = list(per_prompt)
    # [B, k]: every per-prompt quantity summed over each resample in one product, so the run
    # and its baseline are summed over the very same resampled prompts
    sums = np.asarray(counts, dtype=float) @ np.column_stack([per_prompt[k] for k in names])
    total = dict(zip(names, sums.T, strict=True))  # name -> [B]
    if scores is not None:
        put("score", total["score"] / counts.sum(axis=1))  # mean over the resampled prompts
    if spec is not None and speculative:
        put("al", safe_ratio(total["spec_accepted"], total["spec_steps"]))
        put("tokens_per_step", safe_ratio(total["spec_emitted"], total["spec_steps"]))
        if "accepted_by_pos" in spec:
            out.update(_position_intervals(counts, spec))
    if spec is not None:
        put("tokens_per_s_spec", safe_ratio(total["spec_gen"], total["spec_time"]))
    if spec is not None and base is not None:
        rate = safe_ratio(total["spec_gen"], total["spec_time"])  # [B] tokens/s of the run
        base_rate = safe_ratio(total["base_gen"], total["base_time"])
        put("speedup_tokens", safe_ratio(rate, base_rate))
        put("speedup_walltime", safe_ratio(total["base_time"], total["spec_time"]))
    return out


def time_per_output_token(records: Sequence) -> np.ndarray:
    """[N] each request's wall time over its generated tokens (NaN for an empty answer): the
    latency a user of a batched server sees, neighbours' work included."""
    out = np.full(len(records), np.nan)
    for index, record in enumerate(records):
        generated = len(_get(record, "output_ids"))
        if generated:
            out[index] = float(_get(record, "total_time_s")) / generated
    return out


def latency_columns(records: Sequence, n_prompts: int, counts: np.ndarray | None) -> dict:
    """tpot_median_s / tpot_p90_s over the requests and, given the [B, n] resample counts, their
    intervals: each resample weighs a request by how often its prompt was drawn."""
    tpot = time_per_output_token(records)  # [N]
    prompt_of = np.arange(len(records)) % n_prompts  # [N] request -> prompt (repeat order)
    kept = ~np.isnan(tpot)
    out: dict = {}
    for name, quantile in LATENCY_QUANTILES.items():
        # the inverted-CDF quantile (the smallest value with a share >= quantile below it), the
        # same rule as the weighted one of each resample below
        kept_values = tpot[kept]
        out[name] = (
            float(np.quantile(kept_values, quantile, method="inverted_cdf")) if kept.any() else None
        )
        out[f"{name}_ci_low"] = out[f"{name}_ci_high"] = None
        if counts is None or not kept.any():
            continue
        order = np.argsort(tpot[kept])  # [K] the kept requests, fastest first
        values = tpot[kept][order]
        weights = np.asarray(counts, dtype=float)[:, prompt_of[kept][order]]  # [B, K]
        cumulative = weights.cumsum(axis=1)  # [B, K]
        reached = cumulative >= quantile * cumulative[:, -1:] - 1e-9  # weighted inverted CDF
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = percentile_interval(
            values[reached.argmax(axis=1)]
        )
    return out


def _position_intervals(counts: np.ndarray, spec: dict[str, np.ndarray]) -> dict[str, list]:
    """accept_rate_by_pos's intervals: per position j, the ratio of sums over the same [B, n]
    resamples as every other statistic; None at a position undefined on some resample (no step
    of the resampled prompts drafted it)."""
    accepted = counts @ spec["accepted_by_pos"]  # [B, m]
    drafted = counts @ spec["drafted_by_pos"]  # [B, m]
    bounds = [percentile_interval(column) for column in safe_ratio(accepted, drafted).T]  # m pairs
    low_name, high_name = POSITION_INTERVAL_COLUMNS
    return {low_name: [low for low, _ in bounds], high_name: [high for _, high in bounds]}


def compact_scores(scores: Sequence[float]) -> list:
    """Per-prompt scores for the CSV: 0/1 as integers, others rounded to 6 decimals."""
    compact = []
    for value in scores:
        value = float(value)
        if math.isnan(value):
            compact.append(None)
        elif value.is_integer():
            compact.append(int(value))
        else:
            compact.append(round(value, 6))
    return compact


def per_prompt_columns(
    records: Sequence,
    baseline_records: Sequence | None,
    scores_by_prompt: Sequence[float] | None,
    seed: int,
    n_prompts: int | None = None,
    resamples: int = BOOTSTRAP_RESAMPLES,
    batch: int = 1,
) -> dict:
    """The row's per-prompt columns: score_by_prompt, prompts_hash, the intervals, the length
    and diagnostic columns (store/length.py), ci_resamples.

    records / baseline_records: evaluate_task's, in order (repeat after repeat of the prompts);
    scores_by_prompt: the headline metric per prompt in the same prompt order, averaged over
    repeats; seed: the run seed (the bootstrap's stream derives from it); n_prompts: the number
    of distinct prompts (default: len(scores_by_prompt), else one prompt per record).
    Records that do not split into repeats of n_prompts leave the intervals empty with a
    warning rather than fail a finished run.
    """
    records = list(records)
    n_prompts = n_prompts or (len(scores_by_prompt) if scores_by_prompt else len(records))
    if n_prompts < 1 or not records:
        raise ValueError("per_prompt_columns needs at least one record and one prompt")
    if scores_by_prompt and len(scores_by_prompt) != n_prompts:
        warnings.warn(
            f"{len(scores_by_prompt)} per-prompt scores for {n_prompts} prompts; the score "
            "interval and score_by_prompt are left empty",
            stacklevel=2,
        )
        scores_by_prompt = None
    row: dict = {
        "score_by_prompt": compact_scores(scores_by_prompt) if scores_by_prompt else None,
        "prompts_hash": prompts_hash([_get(r, "prompt_ids") for r in records[:n_prompts]]),
        **dict.fromkeys([*interval_column_names(), *POSITION_INTERVAL_COLUMNS]),
        **dict.fromkeys(LATENCY_QUANTILES),
        **dict.fromkeys(LENGTH_COLUMNS),
        **diagnostic_columns(records),
        "ci_resamples": None,
    }
    arms = [records] + ([] if baseline_records is None else [list(baseline_records)])
    if any(len(arm) % n_prompts for arm in arms):
        warnings.warn(
            f"records ({', '.join(str(len(a)) for a in arms)}) do not split into repeats of "
            f"{n_prompts} prompts; the row's intervals are left empty",
            stacklevel=2,
        )
        return row
    baseline = None if baseline_records is None else arms[1]
    if n_prompts < 2:  # one prompt: no spread to resample, so no interval (not a zero-width one)
        row.update(latency_columns(records, n_prompts, None))
        row.update(length_columns(records, baseline, n_prompts, None))
        return row
    spec = per_prompt_totals(records, n_prompts)
    base = None if baseline_records is None else per_prompt_totals(arms[1], n_prompts)
    rng = bootstrap_rng(seed)
    counts = resample_counts(n_prompts, resamples, rng)
    speculative = int(_get(records[0], "num_draft_tokens")) > 0
    scores = None if not scores_by_prompt else np.asarray(scores_by_prompt, dtype=float)
    row.update(bootstrap_intervals(counts, spec, base, scores, speculative))
    row.update(length_columns(records, baseline, n_prompts, counts))  # the prompt resamples
    if batch > 1:  # the timing statistics by wave, from the same stream after the prompt draws
        counts = wave_resample_counts(prompt_waves(n_prompts, batch), resamples, rng)
        timed = bootstrap_intervals(counts, spec, base, None, speculative)
        row.update({f"{s}_ci_{end}": timed[f"{s}_ci_{end}"] for s in TIMED for end in ENDS})
    row.update(latency_columns(records, n_prompts, counts))
    row["ci_resamples"] = resamples
    return row
