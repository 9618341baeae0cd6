"""From per-request RequestRecords to the metric columns of one results row.

Definitions (docs/architecture.md; PAPER.md "Metrics"), pooled over every verification step of
every request, so long generations weigh by their steps as in the reference code's per-step mean:

    al               = sum(accepted) / num_steps          paper's AL, bonus NOT counted, 0..m
    tokens_per_step  = sum(emitted) / num_steps           vLLM / Spec-Bench convention, 1..m+1
    accept_rate      = sum(accepted) / sum(drafted)
    accept_rate_by_pos[j] = #steps with accepted > j / #steps with drafted > j   (j = 0..m-1)
    draft_tokens_rejected = sum(drafted - accepted)        every discarded draft token
    tokens_per_s     = generated tokens / summed machine time (the same count for both arms):
                       a request's own time at batch 1, its share of the batched run's time at
                       batch > 1 (`machine_time`), so it is the run's throughput at any batch
    speedup_tokens   = tokens_per_s_spec / tokens_per_s_baseline
    speedup_walltime = wall_time_baseline_s / wall_time_spec_s

accept_rate_by_pos is the unconditional survival rate vLLM reports per position; when every step
drafts m tokens its entries sum to AL. Generated tokens are counted after stop handling
(`output_ids`) for both arms alike: a pitfall Spec-Bench documents is counting them differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_STEP_LISTS = ("drafted_per_step", "accepted_per_step", "emitted_per_step")
_TIMES = ("draft_time_s", "verify_time_s", "sampler_time_s", "total_time_s")


@dataclass
class _Totals:
    """Sums over a list of records of one arm."""

    n_requests: int
    num_draft_tokens: int  # m, shared by every request; 0 for an autoregressive decoder
    num_steps: int
    drafted: int
    accepted: int
    emitted: int
    generated: int
    accepted_by_pos: list[int]  # [m]: steps whose position j was accepted
    drafted_by_pos: list[int]  # [m]: steps that drafted position j
    times: dict[str, float]
    prefill_time_s: float | None  # None when a record lacks it (optional in older records)
    draft_probs_fallbacks: int | None = None  # vLLM's records only (vllm/decoder.py)
    rule_drafted: int | None = None  # vLLM's records with a rule: the bridge's own counts
    rule_accepted: int | None = None
    vllm_version: str | None = None


def as_dict(record) -> Mapping:
    if isinstance(record, Mapping):
        return record
    if hasattr(record, "to_dict"):
        return record.to_dict()
    raise TypeError(f"expected a RequestRecord or its dict, got {type(record).__name__}")


def machine_time(record) -> float:
    """A request's time on the machine: its own decode time (`total_time_s`) at batch 1, and at
    batch > 1 its share of the batched run's time (`share_time_s`, engine/batched.py), which
    sums to the run's wall time over its requests."""
    get = (
        record.get
        if isinstance(record, Mapping)
        else lambda key, default=None: getattr(record, key, default)
    )
    if int(get("batch_size", 1) or 1) > 1:
        return float(get("share_time_s"))
    return float(get("total_time_s"))


def _totals(records: Iterable, arm: str) -> _Totals:
    dicts = [as_dict(r) for r in records]
    if not dicts:
        raise ValueError(f"summarise needs at least one {arm} record, got none")
    draft_lengths = {int(d.get("num_draft_tokens", 0)) for d in dicts}
    if len(draft_lengths) != 1:
        raise ValueError(
            f"{arm} records mix draft lengths {sorted(draft_lengths)}; summarise "
            "one configuration at a time"
        )
    m = draft_lengths.pop()
    totals = _Totals(
        len(dicts), m, 0, 0, 0, 0, 0, [0] * m, [0] * m, dict.fromkeys(_TIMES, 0.0), 0.0
    )
    for index, record in enumerate(dicts):
        missing = [k for k in (*_STEP_LISTS, *_TIMES, "output_ids") if k not in record]
        if missing:
            raise ValueError(
                f"{arm} record {index} lacks {missing}; pass RequestRecord objects "
                "or RequestRecord.to_dict() output"
            )
        drafted, accepted, emitted = (list(record[k]) for k in _STEP_LISTS)
        if not len(drafted) == len(accepted) == len(emitted):
            raise ValueError(
                f"{arm} record {index}: per-step lists differ in length "
                f"({len(drafted)}, {len(accepted)}, {len(emitted)})"
            )
        for step, (d, a) in enumerate(zip(drafted, accepted, strict=True)):
            if not 0 <= a <= d <= max(m, 0):
                raise ValueError(
                    f"{arm} record {index} step {step}: accepted {a} / drafted {d} "
                    f"is impossible with m = {m}"
                )
            for j in range(d):
                totals.drafted_by_pos[j] += 1
                totals.accepted_by_pos[j] += j < a
        totals.num_steps += len(drafted)
        totals.drafted += sum(drafted)
        totals.accepted += sum(accepted)
        totals.emitted += sum(emitted)
        totals.generated += len(record["output_ids"])
        if record.get("draft_probs_fallbacks") is not None:
            fallbacks = int(record["draft_probs_fallbacks"])
            totals.draft_probs_fallbacks = (totals.draft_probs_fallbacks or 0) + fallbacks
        for key in ("rule_drafted", "rule_accepted"):
            if record.get(key) is not None:
                setattr(totals, key, (getattr(totals, key) or 0) + int(record[key]))
        totals.vllm_version = totals.vllm_version or record.get("vllm_version")
        prefill = record.get("prefill_time_s")
        totals.prefill_time_s = (
            None
            if prefill is None or totals.prefill_time_s is None
            else totals.prefill_time_s + float(prefill)
        )
        for key in _TIMES:
            value = machine_time(record) if key == "total_time_s" else float(record[key])
            if value < 0:
                raise ValueError(f"{arm} record {index}: negative {key} = {value}")
            totals.times[key] += value
    return totals


def _ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None (an empty cell) when the denominator is zero."""
    return numerator / denominator if denominator > 0 else None


def summarise(records: Iterable, baseline_records: Iterable | None = None) -> dict:
    """Metric columns of a results row from this run's records (and the baseline's).

    records: RequestRecords (or their dicts) of the run's own decoder. For a verifier-only run
    (num_draft_tokens 0) the speculation columns (al, tokens_per_step, accept_rate,
    accept_rate_by_pos, draft token counts) are None: empty cells, not 0.
    baseline_records: the verifier-only decoder on the same prompts (interleaved or cached);
    without it the baseline and speedup columns are None.
    """
    spec = _totals(records, "spec")
    speculative = spec.num_draft_tokens > 0
    row: dict = {
        "al": _ratio(spec.accepted, spec.num_steps) if speculative else None,
        "tokens_per_step": _ratio(spec.emitted, spec.num_steps) if speculative else None,
        "accept_rate": _ratio(spec.accepted, spec.drafted) if speculative else None,
        "accept_rate_by_pos": [
            _ratio(a, d) for a, d in zip(spec.accepted_by_pos, spec.drafted_by_pos, strict=True)
        ]
        if speculative
        else None,
        "draft_tokens_drafted": spec.drafted if speculative else None,
        "draft_tokens_accepted": spec.accepted if speculative else None,
        "draft_tokens_rejected": spec.drafted - spec.accepted if speculative else None,
        "generated_tokens": spec.generated,
        "num_steps": spec.num_steps,
        "draft_probs_fallbacks": spec.draft_probs_fallbacks if speculative else None,
        "rule_drafted": spec.rule_drafted if speculative else None,
        "rule_accepted": spec.rule_accepted if speculative else None,
        "vllm_version": spec.vllm_version,
        "prefill_time_s": spec.prefill_time_s,
        "draft_time_s": spec.times["draft_time_s"] if speculative else None,
        "verify_time_s": spec.times["verify_time_s"],
        "sampler_time_s": spec.times["sampler_time_s"] if speculative else None,
        "wall_time_spec_s": spec.times["total_time_s"],
        "tokens_per_s_spec": _ratio(spec.generated, spec.times["total_time_s"]),
        "wall_time_baseline_s": None,
        "baseline_generated_tokens": None,
        "tokens_per_s_baseline": None,
        "speedup_tokens": None,
        "speedup_walltime": None,
    }
    if baseline_records is None:
        return row
    base = _totals(baseline_records, "baseline")
    if base.num_draft_tokens != 0:
        raise ValueError(
            "baseline records must come from the verifier-only "
            f"AutoregressiveDecoder, got num_draft_tokens = {base.num_draft_tokens}"
        )
    if base.n_requests != spec.n_requests:
        raise ValueError(
            f"baseline has {base.n_requests} records but the run has "
            f"{spec.n_requests}; the baseline must decode the same prompts"
        )
    tokens_per_s_baseline = _ratio(base.generated, base.times["total_time_s"])
    row.update(
        wall_time_baseline_s=base.times["total_time_s"],
        baseline_generated_tokens=base.generated,
        tokens_per_s_baseline=tokens_per_s_baseline,
        speedup_tokens=(
            _ratio(row["tokens_per_s_spec"], tokens_per_s_baseline)
            if row["tokens_per_s_spec"] is not None and tokens_per_s_baseline
            else None
        ),
        speedup_walltime=_ratio(base.times["total_time_s"], spec.times["total_time_s"]),
    )
    return row
