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
One loop over positions, vectorised over m, arms and sequences (a few full-tensor operations a
position).

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
    # Longest sequences first: those still running at position t are a prefix of the batch,
    # so each position only touches the sequences that reach it.
    order = torch.argsort(lengths.to(torch.long), descending=True, stable=True)
    lengths = lengths.to(torch.long)[order]
    beta = beta.to(torch.float64)[:, order]
    # P[m, a, s, j]; j runs to max_m + 1 so that a shift never falls off (j = m + 1 is zeroed).
    prob = torch.zeros(max_m, arms, seqs, max_m + 2, dtype=torch.float64)
    prob[..., 0] = 1.0
    state_m = torch.arange(1, max_m + 1).view(max_m, 1, 1, 1)
    accepted = torch.zeros(max_m, arms, seqs, dtype=torch.float64)
    steps = torch.zeros(max_m, arms, seqs, dtype=torch.float64)
    for t in tqdm(range(width), desc="predicted AL", disable=not progress, leave=False):
        alive = int((lengths > t).sum())  # sequences with a token at t
        steps[:, :, :alive] += prob[:, :, :alive, 0]
        live = int((lengths > t + 1).sum())  # ... and a draft at t (t is not their last token)
        if live == 0:
            break
        current = prob[:, :, :live]
        index = state_m.expand(max_m, arms, live, 1)
        survive = current * beta[None, :, :live, t, None]  # states accepting a draft at t
        # j = m has no draft left (its token at t is the bonus): its mass is not an acceptance.
        accepts = survive.sum(-1) - survive.gather(-1, index).squeeze(-1)
        accepted[:, :, :live] += accepts
        moved = torch.empty_like(current)
        moved[..., 1:] = survive[..., :-1]  # accepted: j -> j + 1 ...
        moved.scatter_(-1, index + 1, 0.0)  # ... except from j = m (bonus)
        moved[..., 0] = current.sum(-1) - accepts  # rejected, or the bonus: next step at t + 1
        prob[:, :, :live] = moved  # sequences ending at t are never read again
    restore = torch.argsort(order)
    return accepted[:, :, restore], steps[:, :, restore]


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
