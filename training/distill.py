"""Phase 2 of drafter training: distil the cached teacher distributions into a small drafter.

The drafter (drafter.py: decoder layers initialised from verifier layers, the verifier's frozen
embeddings, a head restricted to the ``subset_size`` ids with most teacher mass plus a learned
bias) is trained on the teacher shards of teacher.py. What speculative sampling accepts
per token is sum_x min(p(x), q(x)) = 1 - TV(p, q) (Leviathan et al., 2023) between the verifier's
and the drafter's *processed* distributions (temperature, top-k, top-p), so the losses are:
- "kl": forward KL(p_target || q_T), q_T the drafter's softmax at temperature T over the subset,
  p_target the processed teacher ("processed") or its softmax at T over the top-64 ("raw");
- "tv": 1 - sum_x min(p, q), p and q both processed (top-k / top-p masks are picked without
  gradient; inside them q is a softmax, so the loss is the acceptance itself, differentiable);
- "kl+tv": their sum (KL gives dense gradients early, TV aims at what is measured).
Validation is the same acceptance on held-out prompts (every ``val_every``-th prompt of the mix).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cactus_bench.engine.sampling import SamplingParams, process_logits
from cactus_bench.paper import PAPER


@dataclass(frozen=True)
class DistillSettings:
    weights: Path
    config: Path
    train_minutes: float = 80.0  # CPU minutes of this phase (process time, not wall time)
    init_layers: tuple[int, ...] = (0, 1, 29)
    subset_size: int = 8192
    prior_share: float = 0.25  # weight of the training texts' token counts in choosing the subset
    loss: str = "kl+tv"
    target: str = "processed"
    lr: float = 7e-4
    warmup_steps: int = 20
    batch_tokens: int = 2048
    val_every: int = 50
    ckpt_minutes: float = 6.0
    temperature: float = PAPER.temperature
    top_k: int = PAPER.top_k
    top_p: float = PAPER.top_p
    seed: int = 0

    @property
    def sampling(self) -> SamplingParams:
        """The law speculative sampling compares: both models' logits processed by it."""
        return SamplingParams(self.temperature, self.top_p, self.top_k)


def choose_subset(
    records: list[dict], prior: torch.Tensor, s: DistillSettings, always: list[int]
) -> tuple[torch.Tensor, float]:
    """The ``subset_size`` head ids (plus ``always``) and the share of teacher mass they hold.

    Ids are ranked by a blend: (1 - prior_share) x their share of the processed teacher mass
    + prior_share x their share of ``prior`` [V] (token counts of the training texts, which
    name things the teacher's answers will repeat but a few hundred thousand teacher tokens
    may not contain yet)."""
    mass = torch.zeros(prior.shape[0], dtype=torch.float64)
    for r in records:
        probs = process_logits(r["top_vals"], s.sampling)  # [G, keep]
        mass.index_add_(0, r["top_idx"].long().flatten(), probs.flatten().double())
    total = float(mass.sum())
    ranked = mass / total
    if s.prior_share > 0 and prior.sum() > 0:
        ranked = (1 - s.prior_share) * ranked + s.prior_share * prior / prior.sum()
    ranked[always] = float("inf")
    ids = ranked.topk(s.subset_size).indices.sort().values
    return ids, float(mass[ids].sum()) / total


def make_batches(records: list[dict], max_tokens: int, seed: int) -> list[list[int]]:
    """Length-sorted index batches of at most ``max_tokens`` padded tokens, in shuffled order."""
    order = sorted(range(len(records)), key=lambda i: len(records[i]["ids"]))
    batches, current, longest = [], [], 0
    for i in order:
        length = len(records[i]["ids"])
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    gen = torch.Generator().manual_seed(seed)
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def subset_lookup(subset: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] position of each vocabulary id in the head's ``subset`` [K], -1 outside it (what
    ``batch_tensors`` maps the teacher's top-k ids through)."""
    lookup = torch.full((vocab_size,), -1, dtype=torch.long)
    lookup[subset] = torch.arange(len(subset))
    return lookup


def padded_batch(seqs: list[torch.Tensor], starts: list[int], counts: list[int]) -> dict:
    """Token id sequences -> right-padded ``ids`` [B, L] (0 after each end) and their attention
    ``mask`` [B, L]; ``rows``, ``cols`` [N]: the targets, ``counts[b]`` consecutive positions of
    row b from ``starts[b]`` on, row after row."""
    ids = torch.zeros((len(seqs), max(len(x) for x in seqs)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, x in enumerate(seqs):
        ids[b, : len(x)] = x.long()
        mask[b, : len(x)] = 1
    rows = [torch.full((g,), b, dtype=torch.long) for b, g in enumerate(counts)]
    cols = [torch.arange(start, start + g) for start, g in zip(starts, counts, strict=True)]
    return {"ids": ids, "mask": mask, "rows": torch.cat(rows), "cols": torch.cat(cols)}


def batch_tensors(records: list[dict], indices: list[int], lookup: torch.Tensor) -> dict:
    """Right-padded ids/mask [B, L], and the N target positions with their teacher top-k."""
    seqs = [records[i] for i in indices]
    # Position prompt_len - 1 + t predicts generated token t.
    starts = [r["prompt_len"] - 1 for r in seqs]
    batch = padded_batch([r["ids"] for r in seqs], starts, [len(r["top_idx"]) for r in seqs])
    teacher_ids = torch.cat([r["top_idx"].long() for r in seqs])  # [N, k]
    batch["teacher_vals"] = torch.cat([r["top_vals"].float() for r in seqs])  # [N, k]
    batch["teacher_sub_idx"] = lookup[teacher_ids]  # [N, k]: position in the subset, -1 outside
    batch["source"] = [r["source"] for r in seqs for _ in range(len(r["top_idx"]))]
    return batch


def student_logits(drafter, batch: dict) -> torch.Tensor:
    """Drafter logits over the subset at the target positions: [N, K]."""
    hidden = drafter.model(input_ids=batch["ids"], attention_mask=batch["mask"]).last_hidden_state
    return drafter.lm_head.subset_logits(hidden[batch["rows"], batch["cols"]])


def processed_student(student: torch.Tensor, s: DistillSettings) -> torch.Tensor:
    """[N, K] logits -> [N, K] processed probabilities q (T, top-k, top-p): the engine's law,
    differentiable inside the kept set (the set itself is picked by comparisons, no gradient)."""
    return process_logits(student, s.sampling)


def acceptance_terms(student: torch.Tensor, batch: dict, s: DistillSettings) -> torch.Tensor:
    """Per position sum_x min(p(x), q(x)) of the processed distributions: [N]."""
    p_top = process_logits(batch["teacher_vals"], s.sampling)  # [N, k]
    sub_idx = batch["teacher_sub_idx"]
    q_at = processed_student(student, s).gather(1, sub_idx.clamp(min=0)) * (sub_idx >= 0)
    return torch.minimum(p_top, q_at).sum(-1)


def distill_loss(student: torch.Tensor, batch: dict, s: DistillSettings) -> torch.Tensor:
    """The loss named by ``s.loss`` (see the module docstring), averaged over positions."""
    loss = student.new_zeros(())
    if "kl" in s.loss:
        inside = batch["teacher_sub_idx"] >= 0
        if s.target == "processed":
            p = process_logits(batch["teacher_vals"], s.sampling)
        else:
            p = torch.softmax(batch["teacher_vals"] / s.temperature, dim=-1)
        p = p * inside  # ids outside the subset are dropped and p renormalised
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
        log_q = torch.log_softmax(student / s.temperature, dim=-1)  # [N, K]
        log_q_at = log_q.gather(-1, batch["teacher_sub_idx"].clamp(min=0))  # [N, k]
        loss = loss + (p * (torch.log(p.clamp_min(1e-12)) - log_q_at)).sum(-1).mean()
    if "tv" in s.loss:
        loss = loss + 1.0 - acceptance_terms(student, batch, s).mean()
    return loss


def _held_out_batches(drafter, records: list[dict], lookup):
    """(student logits [N, K], batch) over ``records`` in fixed evaluation batches."""
    for indices in make_batches(records, 4096, 0):
        batch = batch_tensors(records, indices, lookup)
        yield student_logits(drafter, batch), batch


@torch.no_grad()
def held_out_acceptance(drafter, records: list[dict], lookup, s: DistillSettings) -> dict:
    """Mean per-token acceptance on ``records``: overall and per source (math, instruction)."""
    sums: dict[str, list[float]] = {}
    for student, batch in _held_out_batches(drafter, records, lookup):
        terms = acceptance_terms(student, batch, s)  # [N]
        for source in set(batch["source"]):
            picked = torch.tensor([x == source for x in batch["source"]])
            entry = sums.setdefault(source, [0.0, 0])
            entry[0] += float(terms[picked].sum())
            entry[1] += int(picked.sum())
    result = {k: v[0] / max(v[1], 1) for k, v in sums.items()}
    result["all"] = sum(v[0] for v in sums.values()) / max(sum(v[1] for v in sums.values()), 1)
    return result


CALIBRATION_SCALES = tuple(round(1.0 + 0.1 * i, 1) for i in range(16))  # 1.0, 1.1, ..., 2.5


@torch.no_grad()
def calibrate_logit_scale(
    drafter, records: list[dict], lookup, s: DistillSettings, scales=CALIBRATION_SCALES
) -> tuple[float, dict[float, float]]:
    """The logit scale (`SubsetLMHead.logit_scale`) with the highest mean acceptance on
    ``records``, and the mean acceptance at every scale tried.

    The drafter's logits are computed once per batch and scaled before processing, so a grid of
    scales costs one drafter pass over ``records``. Ties go to the smaller scale."""
    totals = dict.fromkeys(scales, 0.0)
    count = 0
    for student, batch in _held_out_batches(drafter, records, lookup):  # student unscaled
        for scale in scales:
            totals[scale] += float(acceptance_terms(student * scale, batch, s).sum())
        count += student.shape[0]
    means = {scale: total / max(count, 1) for scale, total in totals.items()}
    best = max(scales, key=lambda scale: (means[scale], -scale))
    return best, means
