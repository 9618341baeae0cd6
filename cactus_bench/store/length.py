"""A row's answer-length columns and per-request diagnostics, against its own baseline.

A lossy rule can raise AL and tokens/s while making the answers longer, so the user waits
longer for them; these columns put the length beside the speedup. Per prompt (summed over its
repeats), paired with the verifier-only baseline on the same prompts:

    mean_answer_tokens     = sum(gen) / requests                     the run's mean answer length
    length_ratio (λ)       = sum(gen) / sum(gen_base)                 ratio of sums, with its 95 %
                             interval from the row's own prompt resamples (intervals.py)
    cap_out_share          = requests ending on the token budget / requests (stop_reason length)
    cap_out_diff           = cap_out_share - baseline_cap_out_share, paired, with its interval

Diagnostics of the run's own requests (empty where its records lack them: autoregressive runs,
vLLM, rows written before they existed):

    out_of_head_per_1k     = 1000 * accepted drafts with q(x) < c max q / generated tokens
                             (engine/commit_stats.py, c = 0.2 unless the decoder set another)
    request_accept_rate_p10 / _p90 = the 10th / 90th percentile over requests of a request's own
                             accepted / drafted (very high with loops, very low with garbled text)
    repeat_share           = mean over answers of the share of their 4-grams that repeat
    loop_share             = the share of answers that end in a loop (engine/record.py)

`length_columns_from_arrays` computes the length columns from per-prompt arrays, so a results CSV
whose per-prompt table has lengths and stop reasons (results/paper_claims) gets the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from cactus_bench.store.bootstrap import percentile_interval, safe_ratio

LENGTH_COLUMNS = (
    "mean_answer_tokens",
    "baseline_mean_answer_tokens",
    "length_ratio",
    "length_ratio_ci_low",
    "length_ratio_ci_high",
    "cap_out_share",
    "baseline_cap_out_share",
    "cap_out_diff",
    "cap_out_diff_ci_low",
    "cap_out_diff_ci_high",
)
DIAGNOSTIC_COLUMNS = (
    "out_of_head_per_1k",
    "request_accept_rate_p10",
    "request_accept_rate_p90",
    "repeat_share",
    "loop_share",
)
CAPPED = "length"  # the stop_reason of an answer that ran into the token budget


def _get(record, name: str, default=None):
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def per_prompt_lengths(records: Sequence, n_prompts: int) -> dict[str, np.ndarray]:
    """{gen, capped, requests}: [n_prompts] sums over each prompt's repeats (record i belongs to
    prompt i % n_prompts, as in intervals.per_prompt_totals)."""
    out = {name: np.zeros(n_prompts) for name in ("gen", "capped", "requests")}
    for index, record in enumerate(records):
        prompt = index % n_prompts
        out["gen"][prompt] += len(_get(record, "output_ids"))
        out["capped"][prompt] += _get(record, "stop_reason") == CAPPED
        out["requests"][prompt] += 1
    return out


def length_columns_from_arrays(
    spec: Mapping[str, np.ndarray], base: Mapping[str, np.ndarray] | None, counts
) -> dict:
    """The LENGTH_COLUMNS from per-prompt {gen, capped, requests} of the run and its baseline
    (None: the baseline's columns stay empty) and the [B, n] resample counts (None: no
    intervals)."""
    out: dict = dict.fromkeys(LENGTH_COLUMNS)
    out["mean_answer_tokens"] = float(spec["gen"].sum() / spec["requests"].sum())
    out["cap_out_share"] = float(spec["capped"].sum() / spec["requests"].sum())
    if base is None:
        return out
    out["baseline_mean_answer_tokens"] = float(base["gen"].sum() / base["requests"].sum())
    out["baseline_cap_out_share"] = float(base["capped"].sum() / base["requests"].sum())
    out["cap_out_diff"] = out["cap_out_share"] - out["baseline_cap_out_share"]
    if base["gen"].sum() > 0:
        out["length_ratio"] = float(spec["gen"].sum() / base["gen"].sum())
    if counts is None:
        return out
    counts = np.asarray(counts, dtype=float)
    sums = {
        f"{arm}_{name}": counts @ values[name]  # [B]
        for arm, values in (("spec", spec), ("base", base))
        for name in ("gen", "capped", "requests")
    }
    ratio = safe_ratio(sums["spec_gen"], sums["base_gen"])
    out["length_ratio_ci_low"], out["length_ratio_ci_high"] = percentile_interval(ratio)
    diff = safe_ratio(sums["spec_capped"], sums["spec_requests"]) - safe_ratio(
        sums["base_capped"], sums["base_requests"]
    )
    out["cap_out_diff_ci_low"], out["cap_out_diff_ci_high"] = percentile_interval(diff)
    return out


def length_columns(
    records: Sequence, baseline_records: Sequence | None, n_prompts: int, counts
) -> dict:
    """The LENGTH_COLUMNS of a run (module doc) from its records and its baseline's."""
    spec = per_prompt_lengths(records, n_prompts)
    base = None if baseline_records is None else per_prompt_lengths(baseline_records, n_prompts)
    return length_columns_from_arrays(spec, base, counts)


def diagnostic_columns(records: Sequence) -> dict:
    """The DIAGNOSTIC_COLUMNS of the run's own requests (module doc); None where not measured."""
    out: dict = dict.fromkeys(DIAGNOSTIC_COLUMNS)
    generated = sum(len(_get(r, "output_ids")) for r in records)
    off_head = [_out_of_head(r) for r in records]
    if records and generated and all(count is not None for count in off_head):
        out["out_of_head_per_1k"] = 1000.0 * sum(off_head) / generated
    rates = [_accept_rate(r) for r in records]
    rates = [rate for rate in rates if rate is not None]
    if rates:
        low, high = np.quantile(rates, [0.1, 0.9], method="inverted_cdf")
        out["request_accept_rate_p10"], out["request_accept_rate_p90"] = float(low), float(high)
    shares = [_get(r, "repeat_share") for r in records]
    shares = [float(s) for s in shares if s is not None and not np.isnan(float(s))]
    if shares:
        out["repeat_share"] = float(np.mean(shares))
    loops = [_get(r, "ends_in_loop") for r in records]
    if records and all(loop is not None for loop in loops):
        out["loop_share"] = float(np.mean([bool(loop) for loop in loops]))
    return out


def _accept_rate(record) -> float | None:
    drafted = sum(_get(record, "drafted_per_step", []) or [])
    return sum(_get(record, "accepted_per_step")) / drafted if drafted else None


def _out_of_head(record) -> int | None:
    per_step = _get(record, "out_of_head_per_step", None)
    steps = len(_get(record, "accepted_per_step"))
    if per_step is None or not steps or len(per_step) != steps:
        return None
    return int(sum(per_step))
