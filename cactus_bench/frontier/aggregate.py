"""Means over positions with 95 % intervals from a bootstrap over sequences.

Positions of one sequence are dependent (one context), sequences are independent draws, so the
resampling unit is the sequence: every mean is a ratio sum(numerator) / sum(denominator) of
per-sequence sums, and each bootstrap replicate reweights the sequences by multinomial counts
(one [B, S] weight matrix shared by every statistic, so paired differences such as the gain over
SpS keep their pairing). Intervals are the 2.5 / 97.5 percentiles of the replicates.

Infinite values (KL of a law that puts mass where q = 0) propagate honestly: a mean over
positions containing one is inf, and so is each replicate that draws its sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_bench.store.bootstrap import percentile_bounds


@dataclass
class Estimate:
    """[...] value and its 95 % interval."""

    value: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor


def bootstrap_weights(num_sequences: int, resamples: int, seed: int) -> torch.Tensor:
    """[B, S] float64 multinomial counts (each replicate draws S sequences with replacement)."""
    gen = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, num_sequences, (resamples, num_sequences), generator=gen)
    weights = torch.zeros(resamples, num_sequences, dtype=torch.float64)
    return weights.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))


def per_sequence_sums(values: torch.Tensor, sequence: torch.Tensor, num_sequences: int):
    """[..., N] values, [N] sequence index -> [..., S] sums (NaN entries count as missing)."""
    out = torch.zeros((*values.shape[:-1], num_sequences), dtype=torch.float64)
    return out.index_add_(-1, sequence, values.to(torch.float64))


def _weighted(weights: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
    """[B, S] @ [..., S] -> [B, ...], treating 0 * inf as 0 (a replicate without the sequence)."""
    infinite = torch.isinf(sums)
    finite = torch.where(infinite, torch.zeros_like(sums), sums)
    flat_finite = finite.reshape(-1, sums.shape[-1]).T  # [S, X]
    flat_inf = infinite.reshape(-1, sums.shape[-1]).T.to(torch.float64)
    total = weights @ flat_finite  # [B, X]
    total = torch.where((weights @ flat_inf) > 0, torch.full_like(total, torch.inf), total)
    return total.reshape(weights.shape[0], *sums.shape[:-1])


def ratio_estimate(
    numerator: torch.Tensor, denominator: torch.Tensor, weights: torch.Tensor
) -> Estimate:
    """sum_s numerator / sum_s denominator and its bootstrap interval.

    numerator [..., S]; denominator [..., S] or [S] (broadcast); weights [B, S]."""
    numerator = numerator.to(torch.float64)
    denominator = torch.broadcast_to(denominator.to(torch.float64), numerator.shape)
    value = _sum_inf(numerator) / denominator.sum(-1)
    # [B, ...]; 0 / 0 (a replicate that drew no position of, say, an entropy bin) is NaN and
    # left out of the percentiles.
    replicates = _weighted(weights, numerator) / _weighted(weights, denominator)
    # quantile interpolates (inf - inf is NaN): a finite stand-in for inf, mapped back after.
    huge = torch.finfo(torch.float64).max
    replicates = torch.where(
        torch.isposinf(replicates), torch.full_like(replicates, huge), replicates
    )
    low, high = torch.from_numpy(percentile_bounds(replicates.numpy()))
    low, high = (torch.where(x >= huge / 2, torch.full_like(x, torch.inf), x) for x in (low, high))
    return Estimate(value, low, high)


def _sum_inf(sums: torch.Tensor) -> torch.Tensor:
    infinite = torch.isinf(sums).any(-1)
    total = torch.where(torch.isinf(sums), torch.zeros_like(sums), sums).sum(-1)
    return torch.where(infinite, torch.full_like(total, torch.inf), total)


def entropy_bins(entropy: torch.Tensor, edges: list[float]) -> torch.Tensor:
    """[N] -> [N] bin index in 0..len(edges) - 2; the last bin is closed above (everything
    beyond the last edge joins it), the first takes everything below the first edge."""
    inner = torch.tensor(edges[1:-1], dtype=torch.float64)
    return torch.bucketize(entropy.to(torch.float64), inner, right=True)


def bin_label(edges: list[float], index: int) -> str:
    high = edges[index + 1]
    closing = "]" if index == len(edges) - 2 else ")"
    return f"[{edges[index]:g},{high:g}{closing}"
