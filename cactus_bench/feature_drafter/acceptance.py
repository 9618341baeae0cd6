"""Held-out position-1 acceptance of a feature head and of an independent drafter, same positions.

For every answer token t of a held-out record (the verifier's own sampled answer) the verifier's
processed law q_t was cached at collection; a drafter's law p_t at the same position goes
through the same processing (engine.sampling.process_logits on full-vocabulary logits), and the
per-token acceptance of speculative sampling is sum_x min(p_t(x), q_t(x)) = 1 - TV(p_t, q_t)
(Leviathan et al., 2023). q_t has at most top_k ids with mass, all cached, so the sum over them
is exact. For the feature head this is the acceptance of the *first* drafted token (every
feature it reads is the verifier's); an independent drafter reads tokens only, so its number is
the same at every draft position. Tokens of one answer are correlated: intervals are a
bootstrap over answers (each resample draws answers with replacement and pools their tokens).
"""

from __future__ import annotations

import numpy as np
import torch

from cactus_bench.engine.sampling import SamplingParams, process_logits
from cactus_bench.results.intervals import (
    bootstrap_rng,
    per_token_summary,
    percentile_interval,
    ratio_of_sums,
    resample_counts,
)


def acceptance_at(
    logits: torch.Tensor, q_idx: torch.Tensor, q_prob: torch.Tensor, sampling: SamplingParams
) -> torch.Tensor:
    """[G, V] drafter logits, [G, k] q's ids and probabilities -> [G] sum_x min(p(x), q(x))."""
    p = process_logits(logits, sampling)  # [G, V]
    return torch.minimum(p.gather(-1, q_idx.long()), q_prob.float()).sum(-1)


@torch.no_grad()
def head_acceptance(head, records: list[dict], sampling: SamplingParams) -> list[list[float]]:
    """Per answer, the feature head's position-1 acceptance at every answer token."""
    per_answer = []
    for r in records:
        n, start, g = len(r["ids"]) - 1, r["prompt_len"] - 2, len(r["q_idx"])
        ids, features = r["ids"][None, 1:].long(), r["features"][None, :n].float()
        # Head position P - 2 + t reads (s_{P-1+t}, f_{P-2+t}) and predicts answer token t.
        logits = head.full_logits(ids, features)[0, start : start + g]  # [G, V]
        per_answer.append(acceptance_at(logits, r["q_idx"], r["q_prob"], sampling).tolist())
    return per_answer


@torch.no_grad()
def drafter_acceptance(drafter, records: list[dict], sampling: SamplingParams):
    """Per answer, an independent drafter's acceptance at every answer token (teacher-forced)."""
    per_answer = []
    for r in records:
        start, g = r["prompt_len"] - 1, len(r["q_idx"])
        # Sequence position P - 1 + t predicts answer token t.
        logits = drafter(input_ids=r["ids"][None, :-1].long()).logits[0, start : start + g]
        per_answer.append(acceptance_at(logits, r["q_idx"], r["q_prob"], sampling).tolist())
    return per_answer


summary = per_token_summary  # the pilot's name for it


def paired_difference(
    first: list[list[float]], second: list[list[float]], seed: int, resamples: int = 2000
) -> dict:
    """Mean acceptance of ``first`` minus ``second`` on the same tokens, with a paired bootstrap
    interval (the same answer resamples for both)."""
    if [len(a) for a in first] != [len(b) for b in second]:
        raise ValueError("paired acceptance needs the same answers and tokens in both")
    tokens = np.array([len(values) for values in first], dtype=float)
    diff = np.array([sum(a) - sum(b) for a, b in zip(first, second, strict=True)])
    counts = resample_counts(len(first), resamples, bootstrap_rng(seed))
    low, high = percentile_interval(ratio_of_sums(counts, diff, tokens))
    return {"mean": float(diff.sum() / tokens.sum()), "ci95": [low, high]}
