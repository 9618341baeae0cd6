"""Predicted accepted length AL(m) from the exact per-position acceptance beta_t along a context.

A decode of a T-token context with draft length m, run as the engine runs it: a step that starts
at position s drafts d = min(m, T - s - 1) tokens covering s..s+d-1; draft j is accepted with
probability beta at its position given the ones before it were; the first rejection (or, all
accepted, the bonus) emits one more token and the next step starts after it. AL = expected
accepted drafts / expected steps (the engine's pooled per-step mean, bonus not counted).

It is computed exactly by a forward recursion over positions on the state j = drafts accepted so
far in the current step (P[t, j] = probability that position t is reached in state j):
    t < T - 1, j < m:  accept (beta_t) -> P[t+1, j+1];  reject (1 - beta_t) -> P[t+1, 0]
    t < T - 1, j = m:  bonus at t -> P[t+1, 0]       t = T - 1: the step's last token, stop.
Expected steps = sum_t P[t, 0]; expected accepted = sum_{t < T-1} sum_{j < m} P[t, j] beta_t.

The approximation (state it with any number this produces): beta_t is measured on contexts the
VERIFIER sampled, and draft t + 1 is taken to condition on the verifier's token t. In a real run
the context follows the rule's emitted law (lossy rules drift from q), and after an accepted
draft the next draft conditions on the drafted token, which is distributed as the accepted
mass, not as q. Acceptance at the first draft of a step is exact (`engine_check.py`).
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm


def expected_steps_and_accepts(
    beta: torch.Tensor, lengths: torch.Tensor, max_m: int, progress: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """beta [A, S, T] (position t of sequence s, zero-padded), lengths [S] -> per m = 1..max_m:
    (expected accepted drafts, expected steps), each [max_m, A, S] float64."""
    arms, seqs, width = beta.shape
    beta = beta.to(torch.float64)
    m_values = torch.arange(1, max_m + 1, dtype=torch.float64)  # [M]
    states = torch.arange(max_m + 1, dtype=torch.float64)  # [J] j = 0..max_m
    drafting = (states[None, :] < m_values[:, None]).double()[:, None, None, :]  # [M, 1, 1, J]
    at_bonus = (states[None, :] == m_values[:, None]).double()[:, None, None, :]  # j == m
    prob = torch.zeros(max_m, arms, seqs, max_m + 1, dtype=torch.float64)  # P[t, j]
    prob[..., 0] = 1.0
    accepted = torch.zeros(max_m, arms, seqs, dtype=torch.float64)
    steps = torch.zeros(max_m, arms, seqs, dtype=torch.float64)
    lengths = lengths.to(torch.long)
    for t in tqdm(range(width), desc="predicted AL", disable=not progress, leave=False):
        inside = (t < lengths).double()[None, None, :]  # [1, 1, S]
        steps += prob[..., 0] * inside
        if not bool((t < lengths - 1).any()):
            break
        drafts = (t < lengths - 1).double()[None, None, :, None]  # a draft happens at t
        b = beta[None, :, :, t, None]  # [1, A, S, 1]
        reach_draft = prob * drafting * drafts  # states that draft at position t
        accepted += (reach_draft * b).sum(-1)
        moved = torch.zeros_like(prob)
        moved[..., 1:] = (reach_draft * b)[..., :-1]
        moved[..., 0] = (reach_draft * (1 - b)).sum(-1) + (prob * at_bonus * drafts).sum(-1)
        prob = moved
    return accepted, steps


def simulate_al(beta: list[float], m: int, runs: int, seed: int) -> tuple[float, float]:
    """Direct simulation of the same step process (for tests): (accepted, steps) summed over
    `runs` decodes of one context with per-position acceptance beta."""
    gen = torch.Generator().manual_seed(seed)
    length = len(beta)
    uniforms = torch.rand(runs, length, generator=gen).tolist()
    accepted = steps = 0
    for draw in uniforms:
        start = 0
        while start < length:
            steps += 1
            drafts = min(m, length - start - 1)
            k = 0
            while k < drafts and draw[start + k] < beta[start + k]:
                k += 1
            accepted += k
            start += k + 1
    return float(accepted), float(steps)
