"""Waves and drift: which requests an arm decoded together, and whether the machine sped up or
slowed down while it did.

Both arms decode the requests in waves of `batch` (tasks/lm.py), alternating which arm goes
first; at batch 1 a wave is one request. Each repeat of the prompts starts its own waves, so
record i (repeat after repeat of n prompts) is in wave `wave_of_records` says, and prompt p is in
wave p // batch of every repeat (`prompt_waves`, the bootstrap's clusters: intervals.py).

Drift: an arm's step rate (its decoder steps per second of machine time) over the first half of
its waves against the second half, as `second / first - 1`. The step rate, not tokens/s,
because a wave's tokens/s moves with its content: a wave whose one long answer keeps a single
row in flight for its last steps has few tokens per step, and a speculative step emits a
varying number of tokens. A step costs nearly the same whatever its rows hold, so a change of
step rate is a change of the machine. The prompt passes are left out of a wave's time (their
cost grows with the prompts' lengths, which differ from wave to wave). A wave of several
requests runs as many steps as its longest request (all start at once); a batch-1 wave runs its
request's steps. With fewer than 2 waves there are no halves and no drift. A row is marked
when either arm drifts by more than the threshold (`drift_threshold`, 10 % by default).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cactus_bench.store.summarise import machine_time

ARM_ENDS = ("start", "end")


def _get(record, name: str):
    return record[name] if isinstance(record, Mapping) else getattr(record, name)


def waves_per_repeat(n_prompts: int, batch: int) -> int:
    return -(-n_prompts // max(int(batch), 1))


def prompt_waves(n_prompts: int, batch: int) -> list[int]:
    """[n_prompts] the wave (within a repeat) that decodes each prompt."""
    return [prompt // max(int(batch), 1) for prompt in range(n_prompts)]


def wave_of_records(n_records: int, n_prompts: int, batch: int) -> list[int]:
    """[n_records] the run-wide wave of each record, repeat after repeat of n_prompts."""
    per_repeat = waves_per_repeat(n_prompts, batch)
    return [
        (index // n_prompts) * per_repeat + (index % n_prompts) // max(int(batch), 1)
        for index in range(n_records)
    ]


def _prefill(record) -> float:
    value = record.get("prefill_time_s") if isinstance(record, Mapping) else record.prefill_time_s
    return float(value or 0.0)  # older records may lack it


def wave_rates(records: Sequence, n_prompts: int, batch: int) -> list[tuple[int, float]]:
    """[(decode steps, machine seconds less the prompt passes)] per wave, in decode order."""
    waves = wave_of_records(len(records), n_prompts, batch)
    steps: dict[int, int] = {}
    seconds: dict[int, float] = {}
    for wave, record in zip(waves, records, strict=True):
        steps[wave] = max(steps.get(wave, 0), len(_get(record, "accepted_per_step")))
        seconds[wave] = seconds.get(wave, 0.0) + machine_time(record) - _prefill(record)
    return [(steps[wave], seconds[wave]) for wave in sorted(steps)]


def drift(records: Sequence, n_prompts: int, batch: int) -> float | None:
    """Step rate of the second half of the waves over the first half's, minus 1 (the middle
    wave of an odd count is in neither); None with fewer than 2 waves or no time."""
    rates = wave_rates(records, n_prompts, batch)
    half = len(rates) // 2
    if half < 1:
        return None
    first, second = rates[:half], rates[len(rates) - half :]
    first_time, second_time = sum(t for _, t in first), sum(t for _, t in second)
    if first_time <= 0 or second_time <= 0 or not sum(s for s, _ in first):
        return None
    first_rate = sum(s for s, _ in first) / first_time
    second_rate = sum(s for s, _ in second) / second_time
    return second_rate / first_rate - 1.0


def drift_columns(
    records: Sequence,
    baseline_records: Sequence | None,
    n_prompts: int,
    batch: int,
    threshold: float,
) -> dict:
    """waves, spec_drift, baseline_drift and drift_marked for a row (a cached baseline's drift
    is that of its own decode, at the same batch: the batch is in its key)."""
    spec = drift(records, n_prompts, batch)
    base = None if baseline_records is None else drift(baseline_records, n_prompts, batch)
    measured = [abs(value) for value in (spec, base) if value is not None]
    return {
        "waves": len(set(wave_of_records(len(records), n_prompts, batch))),
        "spec_drift": spec,
        "baseline_drift": base,
        "drift_marked": any(value > threshold for value in measured) if measured else None,
    }


def drift_warning(row: Mapping) -> str | None:
    """The one console line naming a marked row, or None."""
    if not row.get("drift_marked"):
        return None
    moved = [
        f"{name} {value:+.0%}"
        for name, value in (("baseline", row.get("baseline_drift")), ("run", row.get("spec_drift")))
        if value is not None
    ]
    loads = [row.get(f"load_{arm}_{end}") for arm in ("spec", "baseline") for end in ARM_ENDS]
    load = "/".join("-" if v is None else f"{v:.1f}" for v in loads)
    return (
        f"warning: machine drift in row {row.get('run_id')} ({row.get('sampler')}, batch "
        f"{row.get('batch')}): step rate second half vs first of the waves: {', '.join(moved)} "
        f"(threshold {row.get('drift_threshold', 0.1):.0%}; load run/baseline start-end {load}); "
        "the row is marked drift_marked, rerun it on a quieter machine"
    )
