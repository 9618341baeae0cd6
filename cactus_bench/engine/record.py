"""What one generation request leaves behind: tokens, text, per-step acceptance and timings,
and the per-request diagnostics derived from them (its acceptance, its out-of-head commits, how
much of its answer repeats and whether it ends in a loop).

Repetition, pure functions of the answer's token ids:

    repeated_ngram_share(ids, n=4)  the share of the answer's n-grams that equal an earlier one
                                    (None when it has no n-gram: fewer than n tokens)
    ends_in_loop(ids)               true when the answer's last tokens are one block of p <= 64
                                    tokens repeated: at least LOOP_REPEATS times and over at
                                    least LOOP_MIN_SPAN tokens (a decoder stuck in a cycle)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

REPEAT_NGRAM = 4  # the n of repeated_ngram_share
LOOP_MAX_PERIOD = 64  # the longest repeated block ends_in_loop looks for
LOOP_REPEATS = 3  # ... repeated at least this many times
LOOP_MIN_SPAN = 24  # ... over at least this many tokens (a 1-token block: 24 equal tokens)


def repeated_ngram_share(ids: Sequence[int], n: int = REPEAT_NGRAM) -> float | None:
    """The share of the len(ids) - n + 1 n-grams of `ids` that occurred earlier in `ids` (0 for
    an answer without repeats, near 1 for a loop); None when ids has fewer than n tokens."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
    if not grams:
        return None
    return (len(grams) - len(set(grams))) / len(grams)


def ends_in_loop(
    ids: Sequence[int],
    max_period: int = LOOP_MAX_PERIOD,
    repeats: int = LOOP_REPEATS,
    min_span: int = LOOP_MIN_SPAN,
) -> bool:
    """True when some period p <= max_period makes the last max(repeats * p, min_span) tokens
    periodic (ids[i] == ids[i - p] throughout that tail): the answer ends in a cycle."""
    ids = list(ids)
    for period in range(1, max_period + 1):
        span = max(repeats * period, min_span)
        if span > len(ids):
            break
        tail = ids[-span:]
        if all(tail[i] == tail[i - period] for i in range(period, span)):
            return True
    return False


@dataclass
class RequestRecord:
    """One request. Per-step lists have one entry per verification step.

    Speculative: drafted_per_step[i] drafts were verified, accepted_per_step[i] of them accepted
    and emitted_per_step[i] = accepted + 1 tokens emitted (the recovered or bonus token
    included). Autoregressive: one step per token, drafted 0, accepted 0, emitted 1.
    emitted_per_step counts what the sampler emitted; tokens after an EOS or a stop string in
    the last step are dropped from output_ids, so sum(emitted_per_step) >= num_generated.

    Times (seconds, wall clock, device synchronised): prefill_time_s is both models' pass
    over the prompt; draft_time_s the drafter's decode forwards with its sampling;
    verify_time_s the verifier's decode forwards with the logits processing;
    sampler_time_s the acceptance rule (speculative) or the token draw (autoregressive);
    total_time_s the whole request, so total - (the four above) is the engine's own overhead.

    Batched runs (`generate_batch`, engine/batched.py): started_s and finished_s are the request's
    prefill start and last token, in seconds from the start of the run (its time per output token is
    (finished_s - started_s) / num_generated; `generate`: 0 and total_time_s); batch_size is the
    run's number of slots; share_time_s its share of the run's wall time. A batched step's draft,
    verify and sampler times are added to every row active in it, so at batch > 1 they are the times
    the request waited on each phase, not its share of the machine; the decoder's `step_log` has
    each step once.
    """

    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    stop_reason: str = "length"  # "eos" | "stop" | "length"
    num_draft_tokens: int = 0  # m; 0 for the autoregressive decoder
    drafted_per_step: list[int] = field(default_factory=list)
    accepted_per_step: list[int] = field(default_factory=list)
    emitted_per_step: list[int] = field(default_factory=list)
    # accepted drafts per step with q(x) < c max q (engine/commit_stats.py); empty where the
    # decoder does not count them (autoregressive, vLLM, records written before)
    out_of_head_per_step: list[int] = field(default_factory=list)
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    sampler_time_s: float = 0.0
    total_time_s: float = 0.0
    prefill_time_s: float = 0.0
    seed: int | None = None
    sampler_name: str | None = None  # the acceptance rule used; None for autoregressive
    sampling: dict[str, Any] = field(default_factory=dict)  # SamplingParams.to_dict()
    started_s: float = 0.0
    finished_s: float = 0.0
    batch_size: int = 1
    share_time_s: float = 0.0  # its share of the machine: total_time_s at batch 1 (batched.py)

    @property
    def num_steps(self) -> int:
        return len(self.accepted_per_step)

    @property
    def num_generated(self) -> int:
        return len(self.output_ids)

    @property
    def accepted_length(self) -> float:
        """The paper's AL: mean accepted draft tokens per step, bonus not counted (0..m)."""
        if not self.accepted_per_step:
            return math.nan
        return sum(self.accepted_per_step) / len(self.accepted_per_step)

    @property
    def tokens_per_step(self) -> float:
        """vLLM / Spec-Bench convention: mean emitted tokens per step, bonus included (1..m+1)."""
        if not self.emitted_per_step:
            return math.nan
        return sum(self.emitted_per_step) / len(self.emitted_per_step)

    @property
    def accept_rate(self) -> float:
        """This request's accepted drafts / drafted tokens (vLLM #44487's per-request alarm)."""
        drafted = sum(self.drafted_per_step)
        return sum(self.accepted_per_step) / drafted if drafted else math.nan

    @property
    def out_of_head_commits(self) -> int | None:
        """Accepted drafts with q(x) < c max q over the request; None where not counted."""
        if len(self.out_of_head_per_step) != len(self.accepted_per_step) or not self.num_steps:
            return None
        return sum(self.out_of_head_per_step)

    @property
    def repeat_share(self) -> float:
        share = repeated_ngram_share(self.output_ids)
        return math.nan if share is None else share

    @property
    def ends_in_loop(self) -> bool:
        return ends_in_loop(self.output_ids)

    @property
    def tokens_per_second(self) -> float:
        if self.total_time_s <= 0:
            return math.nan
        return self.num_generated / self.total_time_s

    @property
    def overhead_time_s(self) -> float:
        """Wall time spent outside model forwards and the sampler (bookkeeping, stop checks)."""
        spent = self.prefill_time_s + self.draft_time_s + self.verify_time_s + self.sampler_time_s
        return self.total_time_s - spent

    DERIVED = (
        "num_steps",
        "num_generated",
        "accepted_length",
        "tokens_per_step",
        "accept_rate",
        "out_of_head_commits",
        "repeat_share",
        "ends_in_loop",
        "tokens_per_second",
        "overhead_time_s",
    )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: every field plus the derived values (NaN becomes None)."""
        out = asdict(self)
        for name in self.DERIVED:
            value = getattr(self, name)
            out[name] = None if isinstance(value, float) and math.isnan(value) else value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        """Inverse of `to_dict` (derived and unknown keys are ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})
