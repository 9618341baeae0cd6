"""The bridge's step in chunks of requests under a working-set cap, and its own draft counts.

vLLM 0.34's runner V2 has no support compaction in the bridge (bridge_v2.py: no host read), so
each of a step's L = B (m + 1) rows is handled whole: softmaxed laws, the rule's float64 plans
[B, m, V] (samplers/rules/), the residual rows. At batch 64, m = 20 and V = 151,936 that is
5 GB at once for SpS and 13-16 GB for the PlanRule rules (memory.BRIDGE_BYTES_PER_LOGIT),
where vLLM itself caps its logits buffer at 1 GB.
`verify_bounded` therefore verifies the requests in chunks whose rows fit `cap_bytes`
(DEFAULT_CAP_BYTES unless the run sets backend.bridge_working_set_gib): every size is a shape
(batch, m, V, dtypes), so choosing the chunks reads nothing from the device, and a chunk's rows
are gathered by index (its draft rows, then its bonus rows: the regular layout).

Random numbers are drawn once for the whole batch, on first use, in the shapes and order of
the unchunked call, and each chunk reads its requests' share: chunked or not, a step emits
the same tokens.

The rule's own counts: every verified step adds the drafts it verified and accepted to
`DRAFT_TALLY` (a device tensor per device, so no host read), which the workers' start-check
report reads (cactus_bench.vllm.runner) as each request ends: the row carries them beside
vLLM's own counts, and a run where they differ is refused (cactus_bench.vllm.outputs).
"""

from __future__ import annotations

import torch

from cactus_bench.samplers import AcceptanceRule
from cactus_bench.vllm.memory import bridge_bytes_per_logit
from cactus_bench.vllm.padded_rows import Step, Uniforms, verify_step

GIB = 1 << 30
DEFAULT_CAP_BYTES = GIB  # backend.bridge_working_set_gib's default, as vLLM's logits cap
CAP_ENV = "CACTUS_BENCH_VLLM_BRIDGE_GIB"  # set by engines.build_llm before vLLM starts
CAP_BYTES: int | None = None  # this process's cap (register() reads CAP_ENV); None: default
# {device: [2] int64 (drafts verified, drafts accepted)}, summed over this process's steps
DRAFT_TALLY: dict[torch.device, torch.Tensor] = {}


def cap_from_env(environ) -> int | None:
    """CAP_ENV's GiB as bytes (None when unset); ValueError (one line) unless > 0."""
    text = environ.get(CAP_ENV, "").strip()
    if not text:
        return None
    gib = float(text)
    if not gib > 0:
        raise ValueError(f"{CAP_ENV}={text}: the bridge's working set must be > 0 GiB")
    return int(gib * GIB)


def tally(valid: torch.Tensor, num_accepted: torch.Tensor) -> None:
    """Add a step's verified drafts (valid [B, M]) and accepted ones ([B]) on the device."""
    counts = torch.stack([valid.sum(), num_accepted.sum()]).long()
    device = counts.device
    if device not in DRAFT_TALLY:
        DRAFT_TALLY[device] = torch.zeros(2, dtype=torch.long, device=device)
    DRAFT_TALLY[device].add_(counts)


def tally_totals() -> tuple[int, int]:
    """(drafts verified, drafts accepted) by the bridge in this process so far (host reads)."""
    totals = [tensor.tolist() for tensor in DRAFT_TALLY.values()]
    return sum(t[0] for t in totals), sum(t[1] for t in totals)


def requests_per_chunk(rule: AcceptanceRule, step: Step, cap_bytes: int) -> int:
    """How many requests' rows (m draft rows and a bonus row each) fit `cap_bytes`, at the
    rule's measured bytes per logit (cactus_bench.vllm.memory)."""
    batch, m = step.valid.shape
    per_request = (m + 1) * step.target.shape[-1] * bridge_bytes_per_logit(rule.name)
    return max(1, min(batch, cap_bytes // per_request))


def verify_bounded(rule: AcceptanceRule, step: Step, uniforms: Uniforms, cap_bytes=None):
    """`verify_step` in chunks of requests under `cap_bytes` (None: this process's CAP_BYTES,
    else DEFAULT_CAP_BYTES); the step's counts go to DRAFT_TALLY. A drafter law built per
    chunk (bridge_v2.DraftRows) always goes through the chunks, one or more.
    -> (token_ids [B, width + 1] int64, num_accepted [B] int64)."""
    batch = step.valid.shape[0]
    cap_bytes = cap_bytes or CAP_BYTES or DEFAULT_CAP_BYTES
    per_chunk = requests_per_chunk(rule, step, cap_bytes)
    built = step.draft_probs is None or isinstance(step.draft_probs, torch.Tensor)
    if per_chunk >= batch and built:
        out, num_accepted = verify_step(rule, step, uniforms)
    else:
        drawn = DrawnOnce(uniforms, batch)
        parts = [
            verify_step(rule, chunk_of(step, start, start + per_chunk), drawn.part(start))
            for start in range(0, batch, per_chunk)
        ]
        out = torch.cat([part[0] for part in parts])
        num_accepted = torch.cat([part[1] for part in parts])
    tally(step.valid, num_accepted)
    return out, num_accepted


def chunk_of(step: Step, start: int, stop: int) -> Step:
    """Requests start .. stop - 1 of `step`, their rows gathered: draft rows b M .. b M + M - 1
    (a padded slot repeats a row of its request, masked by `valid`), then one bonus row each."""
    row_of = step.row_of[start:stop]  # [b, M]
    batch, m = row_of.shape
    device = row_of.device
    rows = row_of.reshape(-1)  # [b M]
    bonus_rows = None
    if step.bonus_rows is not None:
        rows = torch.cat([rows, step.bonus_rows[start:stop]])
        bonus_rows = batch * m + torch.arange(batch, device=device)
    return Step(
        ids=step.ids[rows],
        target=step.target[rows],
        target_is_logits=step.target_is_logits,
        draft_probs=None if step.draft_probs is None else step.draft_probs[rows],
        row_of=torch.arange(batch * m, device=device).view(batch, m),
        valid=step.valid[start:stop],
        greedy=None if step.greedy is None else step.greedy[start:stop],
        all_greedy=step.all_greedy,
        bonus_ids=None if step.bonus_ids is None else step.bonus_ids[start:stop],
        bonus_rows=bonus_rows,
        width=step.width,
        regular=m > 0,
        support_reads=step.support_reads,
    )


class DrawnOnce:
    """A caller's uniforms drawn for the whole batch on first use; `part(start)` hands a chunk
    its requests' rows, so the draws do not depend on the chunking."""

    def __init__(self, uniforms: Uniforms, batch: int):
        self.uniforms, self.batch = uniforms, batch
        self.accepts: torch.Tensor | None = None  # [B, M] float32
        self.lasts: torch.Tensor | None = None  # [B] float64

    def part(self, start: int) -> _Part:
        return _Part(self, start)


class _Part:
    def __init__(self, drawn: DrawnOnce, start: int):
        self.drawn, self.start = drawn, start

    def accept(self, shape):
        drawn = self.drawn
        if drawn.accepts is None:
            drawn.accepts = drawn.uniforms.accept((drawn.batch, shape[1]))
        return drawn.accepts[self.start : self.start + shape[0]]

    def last(self, batch):
        drawn = self.drawn
        if drawn.lasts is None:
            drawn.lasts = drawn.uniforms.last(drawn.batch)
        return drawn.lasts[self.start : self.start + batch]
