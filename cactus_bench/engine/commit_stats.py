"""What a speculative step commits, measured on the device inside the step: the out-of-head
commits, accepted drafts x the verifier ranks far below its top choice (q(x) < c * max q).

Traces of lossy rules tie longer answers to such commits: an exact rule commits x with
probability q(x), so it commits out-of-head tokens only as often as q itself puts mass there,
while a rule that accepts drafts q ranks low commits them more often. The count is computed on
the device from tensors the step already holds and rides on the step's one host read
(engine/speculative.py, engine/batch_steps.py), so it costs no synchronisation.

q here is the verifier's sampling law, after temperature, top-p and top-k (the law the rule
verifies against), at the drafted positions.
"""

from __future__ import annotations

import torch

OUT_OF_HEAD_C = 0.2  # the default c: out of head when q(x) < 0.2 * max q (lossy-token-eff's)


def draft_probabilities(target_probs: torch.Tensor, draft_ids: torch.Tensor) -> torch.Tensor:
    """[B, m] q_j(x_j): the verifier's probability of each drafted token.
    target_probs: [B, >= m, V] q_1..q_m (the bonus position, if present, is ignored);
    draft_ids: [B, m] sampler-space ids of the drafts."""
    m = draft_ids.shape[1]
    return target_probs[:, :m].gather(-1, draft_ids[..., None]).squeeze(-1)


def out_of_head(
    q_at_drafts: torch.Tensor, q_max: torch.Tensor, accepted: torch.Tensor, c: float
) -> torch.Tensor:
    """[B] long: per row, the accepted drafts x_j (j < accepted[b]) with q_j(x_j) < c * max q_j.

    q_at_drafts: [B, m] q_j(x_j); q_max: [B, m] max_x q_j(x); accepted: [B] accepted drafts
    (0..m; positions at or beyond it are rejected or padding and never count); c in [0, 1]."""
    if not 0.0 <= c <= 1.0:
        raise ValueError(f"the out-of-head threshold c must lie in [0, 1]; got {c}")
    m = q_at_drafts.shape[1]
    position = torch.arange(m, device=q_at_drafts.device)  # [m]
    kept = position[None, :] < accepted.to(position.dtype)[:, None]  # [B, m] accepted positions
    low = q_at_drafts < c * q_max  # [B, m] out of q's head
    return (kept & low).sum(-1)


def step_out_of_head(
    target_probs: torch.Tensor, draft_ids: torch.Tensor, emitted: torch.Tensor, c: float
) -> torch.Tensor:
    """[B] long: `out_of_head` of one step from what the step holds. target_probs: [B, >= m, V]
    q_1..; draft_ids: [B, m] (m may be 0: a step of bonus tokens only); emitted: [B, >= 1] the
    rule's output ids, -1 on the unused tail, so a row accepted (emitted >= 0).sum() - 1."""
    accepted = (emitted >= 0).sum(-1) - 1  # [B]
    if draft_ids.shape[1] == 0:
        return torch.zeros_like(accepted)
    q_max = target_probs[:, : draft_ids.shape[1]].amax(-1)  # [B, m]
    return out_of_head(draft_probabilities(target_probs, draft_ids), q_max, accepted, c)
