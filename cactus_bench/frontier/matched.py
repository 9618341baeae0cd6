"""Rule pairs at matched divergence: acceptance of one rule minus another's at the same D_f.

Two rules are compared where their emitted laws diverge from q by the same mean amount, not at
the same parameter (a delta, an alpha and a threshold are not comparable). For an arm a of rule
A with mean D_f(law || q) = d_a, rule B's curve (its arms sorted by mean D_f) is interpolated
linearly between the two arms j, j+1 that bracket d_a:

    lam = (d_a - d_j) / (d_{j+1} - d_j),   beta_B(d_a) = (1 - lam) beta_j + lam beta_{j+1}

which is the operating point of time-sharing between j and j+1 (running j at a share 1 - lam of
the positions and j+1 at the rest spends exactly d_a on average and accepts beta_B(d_a)). Rows:

    matched_<f>_acceptance_vs:<B>    mean beta_a - beta_B(d_a), paired bootstrap interval

The bootstrap redraws sequences once for every statistic (aggregate.bootstrap_weights) and
solves lam again inside each replicate, so the interval carries the uncertainty of the match as
well as of both acceptances. Arms outside B's range (no bracketing pair: no extrapolation), an
infinite d_a (mass where q = 0) and curves with fewer than two finite points give no row. Each
unordered pair of rules is compared once: every arm of the rule that comes later in the grid
against the curve of the rule that comes earlier.
"""

from __future__ import annotations

import numpy as np
import torch

from cactus_bench.frontier.aggregate import per_sequence_sums
from cactus_bench.samplers import DIVERGENCES
from cactus_bench.store.bootstrap import percentile_bounds

_TIE = 1e-12  # two arms of a curve closer than this in mean D_f are one point


def matched_rows(arms, stats, sequence, lengths, weights) -> list[dict]:
    """[A, N] per-position beta and D_f of every arm -> matched-divergence comparison rows."""
    num_seq, total = lengths.shape[0], int(lengths.sum())
    counts = per_sequence_sums(torch.ones(total, dtype=torch.float64), sequence, num_seq)
    boot_counts = weights @ counts  # [B] positions in each replicate

    def means(values: torch.Tensor):  # [A, N] -> point [A], replicates [B, A]
        sums = per_sequence_sums(values, sequence, num_seq)  # [A, S]
        return sums.sum(-1) / counts.sum(), (weights @ sums.T) / boot_counts[:, None]

    beta, beta_boot = means(stats["beta"])
    order = _rule_order(arms)
    rows = []
    for f in DIVERGENCES:
        finite = torch.isfinite(stats[f]).all(-1)  # [A] arms with a finite mean D_f
        safe = torch.where(torch.isfinite(stats[f]), stats[f], torch.zeros_like(stats[f]))
        div, div_boot = means(safe)
        curves = {
            rule: _curve([i for i in indices if finite[i]], div) for rule, indices in order.items()
        }
        rules = list(order)
        for later_index, rule_a in enumerate(rules):
            for rule_b in rules[:later_index]:
                curve = curves[rule_b]
                if len(curve) < 2:
                    continue
                for a in order[rule_a]:
                    if not finite[a]:
                        continue
                    segment = _bracket(curve, div, float(div[a]))
                    if segment is None:
                        continue
                    j, k = segment
                    value = float(beta[a] - _interpolate(beta, div, j, k, div[a]))
                    replicates = beta_boot[:, a] - _interpolate(
                        beta_boot, div_boot, j, k, div_boot[:, a]
                    )
                    # a replicate where the segment's ends meet has no lam: left out (NaN)
                    replicates = torch.where(
                        torch.isfinite(replicates), replicates, torch.full_like(replicates, np.nan)
                    )
                    low, high = percentile_bounds(replicates.numpy())
                    rows.append(
                        {
                            "rule": arms[a].rule,
                            "parameter": arms[a].parameter,
                            "statistic": f"matched_{f}_acceptance_vs:{rule_b}",
                            "value": value,
                            "ci_low": _finite(low),
                            "ci_high": _finite(high),
                            "n_positions": total,
                        }
                    )
    return rows


def _rule_order(arms) -> dict[str, list[int]]:
    """{rule: its arm indices}, rules in grid order (sps, then the configured rules)."""
    order: dict[str, list[int]] = {}
    for index, arm in enumerate(arms):
        order.setdefault(arm.rule, []).append(index)
    return order


def _curve(indices: list[int], div: torch.Tensor) -> list[int]:
    """A rule's arms sorted by mean D_f, ties (to _TIE) kept once."""
    ordered = sorted(indices, key=lambda i: float(div[i]))
    curve: list[int] = []
    for index in ordered:
        if not curve or float(div[index]) - float(div[curve[-1]]) > _TIE:
            curve.append(index)
    return curve


def _bracket(curve: list[int], div: torch.Tensor, target: float) -> tuple[int, int] | None:
    """The consecutive arms (j, k) of the curve with d_j <= target <= d_k, or None."""
    for j, k in zip(curve, curve[1:], strict=False):
        if float(div[j]) <= target <= float(div[k]):
            return j, k
    return None


def _interpolate(beta, div, j: int, k: int, target):
    """beta on the segment j-k at mean divergence `target` (last axis: arms; any leading)."""
    lam = (target - div[..., j]) / (div[..., k] - div[..., j])
    return (1 - lam) * beta[..., j] + lam * beta[..., k]


def _finite(value) -> float | None:
    return float(value) if np.isfinite(value) else None
