"""Every request of a vLLM step through one rule call: padded, compacted rows (pure torch).

vLLM hands the rejection sampler one flat row per drafted token, request after request. The
bridge (cactus_bench.vllm.bridge) reads its layout into a `Step`: for each request b its draft
rows `row_of[b, :count_b]` of the flat tensors, padded to a width M with a mask. `verify_step`
then runs the chain of cactus_bench.samplers.base once for the whole batch:

    compact   each flat row keeps only the columns where p > 0 or q > 0 (and its draft id):
              at top-k 20 that is <= 41 of 151,936; a rule's hooks never see the others
              (zero mass on both laws: no rule can draft, accept or recover there)
    accept    a [B, M] from the rule's hooks on [B, M, K] rows; padded slots never accept;
              k = number of leading accepts (cumulative product)
    last      one recovery row per request at position k (the rule's residual), the bonus
              token where all drafts were accepted (torch.where), greedy requests as vLLM does
    out       [B, width + 1]: accepted drafts, the last token, then -1

Why rules are called through their hooks (accept_prob / recovery_weights / plan) and not
through `rule.verify`: verify takes [B, m, V] with one m for all rows, so ragged drafts would
need a recovery at padded positions; and it checks its inputs with a host read per call.

Host reads: the compact width K is data-dependent, so each step reads two scalars (the total
support, then the largest row's; `nonzero` sizes its output with the first); nothing else
leaves the device. A Step with support_reads=False (runner V2) skips the compaction: full rows,
no host read at all. Uniforms come from a
`Uniforms` object of the caller (runner V1: vLLM's generators for seeded requests and one
global draw for the rest; runner V2: a counter-based hash of vLLM's per-request seed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import torch

from cactus_bench.samplers import AcceptanceRule, DraftStats

PLACEHOLDER_TOKEN_ID = -1  # vLLM's id for rejected / unused output slots (both runners)
# Compact only when the largest row support is at most this share of the vocabulary: past it
# the gathers cost about as much as the full rows they would spare.
COMPACT_SHARE = 0.5


@dataclass(frozen=True)
class Step:
    """One vLLM step in flat rows (R rows; V1: R = drafts, V2: R = drafts + bonus rows)."""

    ids: torch.Tensor  # [R] int64: the draft id verified at each row (any id >= 0 elsewhere;
    # one >= V, a drafter id outside the verifier's vocabulary, is rejected, never clamped)
    target: torch.Tensor  # [R, V] the verifier's processed logits (or probabilities)
    target_is_logits: bool
    draft_probs: torch.Tensor | None  # [R, V] the drafter's law (None: greedy drafts)
    row_of: torch.Tensor  # [B, M] int64: request b's j-th draft row (clamped where padded)
    valid: torch.Tensor  # [B, M] bool: j < count_b
    greedy: torch.Tensor | None  # [B] bool temperature-0 requests; None: none is greedy
    all_greedy: bool  # every request is greedy (vLLM says so on the host): no rule call
    bonus_ids: torch.Tensor | None  # [B] int64 a bonus id vLLM drew (V1) ...
    bonus_rows: torch.Tensor | None  # ... or [B] int64: the row of target holding its law (V2)
    width: int  # output columns minus one (max_spec_len / num_speculative_steps)
    regular: bool = False  # request b's M draft slots are rows b M .. b M + M - 1 (V1's layout;
    # a chunk's, working_set.chunk_of, whose bonus rows follow)
    # compact rows to their support, at two host reads (V1); False: full rows, no host read
    # (V2, whose bridge must not read the device)
    support_reads: bool = True


class Uniforms(Protocol):
    def accept(self, shape: tuple[int, int]) -> torch.Tensor:  # [B, M] float32
        ...

    def last(self, batch: int) -> torch.Tensor:  # [B] float64
        ...


# ---- compaction ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compact:
    """Rows restricted to their support: slot s of row r is vocabulary id cols[r, s]."""

    cols: torch.Tensor | None  # [R, K] int64 (None: all V columns, in order)
    q: torch.Tensor  # [R, K] float32 verifier law (softmax of the kept logits)
    p: torch.Tensor  # [R, K] float32 drafter law
    ids: torch.Tensor  # [R] int64 slot of the row's draft id

    def to_vocab(self, rows: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """[B] vocabulary ids of compact `slots` in flat `rows`."""
        if self.cols is None:
            return slots
        return self.cols[rows, slots]


def compact_rows(step: Step, live_rows: torch.Tensor | None) -> Compact:
    """The support of every flat row; `live_rows` [R] bool: False rows keep only their draft id
    (a greedy request's row: its result comes from the argmax, the rule's is discarded)."""
    target, ids = step.target, step.ids
    rows, vocab = target.shape
    # [R, V] bool; "> -inf" and "> 0" are single cheap passes (isfinite is ~4x slower on CPU)
    if not step.support_reads:
        return _full_rows(step)
    live = target > float("-inf") if step.target_is_logits else target > 0
    if step.draft_probs is not None:
        live |= step.draft_probs > 0
    if live_rows is not None:
        live &= live_rows.unsqueeze(-1)
    live[torch.arange(rows, device=target.device), ids] = True
    # two host reads, as K is a shape: the total support (a dense one would make nonzero's
    # index lists larger than the rows), then the largest row's
    dense = int(torch.count_nonzero(live)) > COMPACT_SHARE * live.numel()
    if not dense:
        # nonzero lists a row's columns in increasing order; slot = rank within the row
        row_nz, col_nz = live.nonzero(as_tuple=True)  # [nnz]
        sizes = torch.bincount(row_nz, minlength=rows)  # [R]
        width = int(sizes.max()) if rows else 0
    del live
    if dense or width > COMPACT_SHARE * vocab:
        return _full_rows(step)
    first = sizes.cumsum(0) - sizes  # [R] offset of each row's first entry
    slot = torch.arange(row_nz.numel(), device=target.device) - first[row_nz]
    cols = torch.zeros((rows, width), dtype=torch.long, device=target.device)
    cols[row_nz, slot] = col_nz
    used = torch.arange(width, device=target.device) < sizes.unsqueeze(-1)  # [R, K]
    # padded slots point at column 0 and carry no mass on either law
    kept = target.gather(1, cols).float()
    if step.target_is_logits:
        q = torch.softmax(kept.masked_fill(~used, float("-inf")), dim=-1)
    else:
        q = kept * used
    slot_of_id = ((cols == ids.unsqueeze(-1)) & used).int().argmax(-1)  # [R] (first match)
    if step.draft_probs is None:
        p = torch.nn.functional.one_hot(slot_of_id, width).to(q.dtype)
    else:
        p = step.draft_probs.gather(1, cols).to(q.dtype) * used
    return Compact(cols=cols, q=q, p=p, ids=slot_of_id)


def _full_rows(step: Step) -> Compact:
    """Every column of every row (no support read)."""
    q = step.target.float()
    q = torch.softmax(q, dim=-1) if step.target_is_logits else q
    p = _full_draft_law(step.draft_probs, step.ids, step.target.shape[-1], q.dtype)
    return Compact(cols=None, q=q, p=p, ids=step.ids)


def _full_draft_law(draft_probs, ids, vocab, dtype) -> torch.Tensor:
    if draft_probs is None:  # greedy drafts: a point mass (only greedy / tas may run then)
        return torch.nn.functional.one_hot(ids, vocab).to(dtype)
    return draft_probs.to(dtype)


def invert_cdf(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """[R] one index per row of non-negative weights [R, K] for given uniforms [R] (float64):
    the inverse CDF of cactus_bench.samplers.chain.sample_categorical, never a zero weight."""
    cdf = weights.to(torch.float64).cumsum(dim=-1)  # [R, K]
    total = cdf[:, -1:]
    index = torch.searchsorted(cdf, uniform.unsqueeze(-1) * total, right=True).squeeze(-1)
    last_positive = weights.shape[-1] - 1 - (weights.flip(-1) > 0).to(torch.int8).argmax(-1)
    return torch.minimum(index, last_positive)


# ---- the chain -------------------------------------------------------------------------------
def verify_step(rule: AcceptanceRule, step: Step, uniforms: Uniforms):
    """-> (token_ids [B, width + 1] int64, -1 padded; num_accepted [B] int64)."""
    batch, m = step.valid.shape
    device = step.target.device
    counts = step.valid.sum(-1)  # [B]
    rows = torch.arange(batch, device=device)
    draws_last = not (rule.recovery_is_argmax and rule.bonus_is_argmax)
    num_accepted = torch.zeros(batch, dtype=torch.long, device=device)
    last = torch.zeros(batch, dtype=torch.long, device=device)
    ids = step.ids[step.row_of] if m else step.ids.new_zeros((batch, 0))  # [B, M] vocab ids
    vocab = step.target.shape[-1]
    outside = ids >= vocab  # [B, M] drafts the verifier cannot emit: rejected, not clamped
    step = replace(step, ids=step.ids.clamp(max=vocab - 1))  # a valid index for the gathers

    if m and not step.all_greedy:
        live_rows = None if step.greedy is None else _rule_rows(step)
        compact = compact_rows(step, live_rows)
        accepted, residual_at = _accept(rule, compact, step, uniforms, step.valid & ~outside)
        num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B]
        rejected = num_accepted < counts
        at = num_accepted.clamp(max=m - 1)  # the recovery's position (bonus rows ignore it)
        u_last = uniforms.last(batch) if draws_last else None
        slots = residual_at(at, u_last)  # [B] compact slot of the recovered token
        recovered = compact.to_vocab(step.row_of[rows, at], slots)
        if step.bonus_rows is not None:
            bonus = _bonus_from_rows(rule, compact, step.bonus_rows, u_last)
        else:
            bonus = step.bonus_ids.long()
        last = torch.where(rejected, recovered, bonus)
    elif step.bonus_rows is not None:  # no drafts at all: the bonus law only
        u_last = uniforms.last(batch) if draws_last else None
        last = _bonus_from_rows(rule, compact_rows(step, None), step.bonus_rows, u_last)
    elif step.bonus_ids is not None:
        last = step.bonus_ids.long()

    if step.greedy is not None:  # vLLM's greedy verification, whatever the rule
        argmax = step.target.argmax(dim=-1)  # [R] over the full vocabulary (raw logits)
        match = (argmax[step.row_of] == ids) & step.valid & ~outside if m else step.valid
        k_greedy = match.long().cumprod(dim=1).sum(dim=1)
        if step.bonus_rows is not None:
            greedy_bonus = argmax[step.bonus_rows]
        else:
            greedy_bonus = step.bonus_ids.long()
        if m:
            stop = argmax[step.row_of[rows, k_greedy.clamp(max=m - 1)]]
            greedy_last = torch.where(k_greedy < counts, stop, greedy_bonus)
        else:
            greedy_last = greedy_bonus
        num_accepted = torch.where(step.greedy, k_greedy, num_accepted)
        last = torch.where(step.greedy, greedy_last, last)

    out = torch.full((batch, step.width + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.long, device=device)
    if m:
        keep = torch.arange(m, device=device) < num_accepted.unsqueeze(-1)  # [B, M]
        out[:, :m] = torch.where(keep, ids, out[:, :m])
    out.scatter_(1, num_accepted.unsqueeze(-1), last.unsqueeze(-1))
    return out, num_accepted


def _rule_rows(step: Step) -> torch.Tensor:
    """[R] bool: False on the rows of greedy requests (counted, as padded slots repeat rows)."""
    greedy_slots = (step.greedy.unsqueeze(-1) & step.valid).flatten().int()  # [B * M]
    owned = torch.zeros(step.ids.shape[0], dtype=torch.int32, device=step.ids.device)
    owned.index_add_(0, step.row_of.flatten(), greedy_slots)
    if step.bonus_rows is not None:
        owned.index_add_(0, step.bonus_rows, step.greedy.int())
    return owned == 0


def _accept(rule, compact: Compact, step: Step, uniforms: Uniforms, allowed: torch.Tensor):
    """-> (accepted [B, M] bool, residual_at(position [B], u_last [B]) -> slot [B]);
    allowed [B, M]: the drafts that may be accepted (valid, inside the verifier's vocabulary)."""
    batch, m = step.row_of.shape
    rows = torch.arange(batch, device=step.row_of.device)
    # [B, M, K] drafter rows: a view when request b's drafts are rows b M .. b M + M - 1
    p = compact.p[: batch * m].view(batch, m, -1) if step.regular else compact.p[step.row_of]
    slot = compact.ids[step.row_of].unsqueeze(-1)  # [B, M, 1]
    if hasattr(rule, "plan"):  # samplers/rules/: the builder's (a, r), every position at once
        q = compact.q[: batch * m].view(batch, m, -1) if step.regular else compact.q[step.row_of]
        accept, residual = rule.plan(p, q, check=False)  # [B, M, K] float64 each; no host read
        uniform = uniforms.accept((batch, m))
        accepted = (uniform < accept.gather(-1, slot).squeeze(-1)) & allowed
        if getattr(rule, "reads_window", False):  # FLy: a rejection kept by the drafts after it
            # padding is False in `accepted`, so a window reaching past a row's drafts never fits
            accepted = rule.builder.across_window(accepted, p, q, slot.squeeze(-1)) & allowed

        def residual_at(at, u_last):
            return invert_cdf(residual[rows, at], u_last)

        return accepted, residual_at

    # the rule contract's [B, M + 1, K] verifier rows in one gather; row M (the bonus row of
    # rule.verify) repeats row M - 1: the hooks read rows :M only
    q_ext = compact.q[torch.cat([step.row_of, step.row_of[:, -1:]], dim=1)]
    q = q_ext[:, :m]  # [B, M, K] (a view)
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    q_sums, p_sums = q.sum(-1, dtype=dtype), p.sum(-1, dtype=dtype)  # [B, M]
    q_n = (q.gather(-1, slot).squeeze(-1) / q_sums).clamp(0.0, 1.0)
    p_n = (p.gather(-1, slot).squeeze(-1) / p_sums).clamp(0.0, 1.0)
    stats = DraftStats(
        q_n=q_n,
        p_n=p_n,
        target_probs=q_ext,
        target_sums=torch.cat([q_sums, q_sums[:, -1:]], dim=1),
        draft_token_ids=slot.squeeze(-1),
    )
    accept = rule.accept_prob(stats)  # [B, M]
    if rule.deterministic_accept:
        accepted = accept >= 0.5
    else:
        accepted = uniforms.accept((batch, m)) < accept
    accepted &= allowed

    def residual_at(at, u_last):
        q_row = q[rows, at].to(dtype) / q_sums[rows, at].unsqueeze(-1)  # [B, K]
        if rule.recovery_is_argmax:
            return q_row.argmax(dim=-1)
        p_row = p[rows, at].to(dtype) / p_sums[rows, at].unsqueeze(-1)
        n = slot[rows, at, 0]
        weights = rule.recovery_weights(p_row, q_row, n, q_n[rows, at], p_n[rows, at])
        weights = weights.clamp(min=0)
        empty = weights.sum(dim=-1, keepdim=True) <= 0
        weights = torch.where(empty, rule.fallback_weights(q_row, n), weights)
        return invert_cdf(weights, u_last)

    return accepted, residual_at


def _bonus_from_rows(rule, compact: Compact, bonus_rows, u_last) -> torch.Tensor:
    """[B] the bonus token drawn from each request's bonus row (argmax for a greedy rule)."""
    law = compact.q[bonus_rows]  # [B, K]
    slots = law.argmax(dim=-1) if rule.bonus_is_argmax else invert_cdf(law, u_last)
    return compact.to_vocab(bonus_rows, slots)
