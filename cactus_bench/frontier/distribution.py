"""Frontier v2: the per-position distribution of the emitted law's divergence, Theorem 3's
D_f(p || q) bound position by position, overshoot by q(n) and gamma, and paired differences.

Rows (the CSV's columns; statistic names below, definitions in docs/frontier.md):

    <f>_q50, <f>_q90, <f>_q99, <f>_max   quantiles and max over positions of D_f(law_t || q_t),
                                         f in kl reverse_kl chi2 hellinger tv (no interval)
    <f>_share_above_delta                share of positions with D_f(law_t || q_t) > delta
                                         (arms with a budget: cactus, cactus_exact, mentored)
    thm3_violation_share, thm3_max_excess  share of positions where D_f(law_t || q_t) exceeds
                                         D_f(p_t || q_t) for the arm's own f, and the largest
                                         excess (Theorem 3's second bound)
    overshoot@q=[a,b),gamma=[c,d)        within the cell, the p-weighted share of drafts whose
                                         target breaks the budget (cactus rules); draft_mass@...
                                         the cell's share of all draft mass
    paired_acceptance_vs:<rule>, paired_<f>_vs:<rule>   mean per-position difference between
                                         this arm and <rule> at the same delta, with a paired
                                         bootstrap interval (cactus_exact:kl vs cactus: exact
                                         minus Taylor; mentored vs cactus_exact:reverse_kl, the
                                         two rules that bound KL(q || .) by delta)
"""

from __future__ import annotations

import torch

from cactus_bench.frontier.aggregate import per_sequence_sums, ratio_estimate
from cactus_bench.frontier.arms import BUDGETED
from cactus_bench.frontier.stats import GAMMA_EDGES, Q_EDGES
from cactus_bench.samplers import DIVERGENCES

QUANTILES = (0.5, 0.9, 0.99)
_ABOVE_RTOL, _ABOVE_ATOL = 1e-9, 1e-12  # certified roots sit on delta: not "above" by rounding
# (arm, the arm it is compared against at the same delta) for the paired rows
PAIRS = (("cactus_exact:kl", "cactus"), ("mentored", "cactus_exact:reverse_kl"))


def _row(arm, statistic, value, low=None, high=None, count=None) -> dict:
    return {
        "rule": arm.rule,
        "parameter": arm.parameter,
        "statistic": statistic,
        "value": float(value),
        "ci_low": None if low is None else float(low),
        "ci_high": None if high is None else float(high),
        "n_positions": count,
    }


def _quantiles(values: torch.Tensor) -> list[float]:
    """Quantiles of [N] values with inf kept (a finite stand-in for the interpolation)."""
    huge = torch.finfo(torch.float64).max
    finite = torch.where(torch.isposinf(values), torch.full_like(values, huge), values)
    levels = torch.tensor(QUANTILES, dtype=torch.float64)
    found = torch.quantile(finite, levels).tolist()
    return [torch.inf if value >= huge / 2 else value for value in found]


def distribution_rows(arms, stats, sequence, lengths, weights) -> list[dict]:
    """Quantiles, max, share above delta and Theorem 3's check, for every arm and f."""
    num_seq, total = lengths.shape[0], int(lengths.sum())
    counts = per_sequence_sums(torch.ones(total, dtype=torch.float64), sequence, num_seq)

    def mean(values):  # [N] -> (value, low, high) of the per-position mean
        estimate = ratio_estimate(
            per_sequence_sums(values[None], sequence, num_seq), counts, weights
        )
        return float(estimate.value[0]), float(estimate.low[0]), float(estimate.high[0])

    rows = []
    for index, arm in enumerate(arms):
        for f in DIVERGENCES:
            values = stats[f][index]
            for level, value in zip(QUANTILES, _quantiles(values), strict=True):
                rows.append(_row(arm, f"{f}_q{round(level * 100)}", value, count=total))
            rows.append(_row(arm, f"{f}_max", values.max(), count=total))
            if arm.kind in BUDGETED:
                above = values > arm.value * (1 + _ABOVE_RTOL) + _ABOVE_ATOL
                rows.append(_row(arm, f"{f}_share_above_delta", *mean(above.double()), total))
        excess = stats["thm3_excess"][index]
        if not bool(torch.isnan(excess).all()):
            broken = excess > _ABOVE_ATOL
            rows.append(_row(arm, "thm3_violation_share", *mean(broken.double()), total))
            rows.append(_row(arm, "thm3_max_excess", excess.max(), count=total))
    return rows


def overshoot_cell_rows(arms, cells: torch.Tensor) -> list[dict]:
    """[A, Qb, Gb, 2] draft mass and overshoot mass -> per cell share rows (cactus rules)."""
    rows = []
    for index, arm in enumerate(arms):
        total = float(cells[index, ..., 0].sum())
        if arm.kind not in ("cactus", "cactus_exact") or total <= 0:
            continue
        for qi in range(len(Q_EDGES) - 1):
            for gi in range(len(GAMMA_EDGES) - 1):
                mass, over = cells[index, qi, gi].tolist()
                label = f"q={_bin(Q_EDGES, qi)},gamma={_bin(GAMMA_EDGES, gi, low_open=True)}"
                rows.append(_row(arm, f"draft_mass@{label}", mass / total))
                if mass > 0:
                    rows.append(_row(arm, f"overshoot@{label}", over / mass))
    return rows


def _bin(edges, index, low_open=False) -> str:
    last = index == len(edges) - 2
    if low_open:  # gamma bins (c, d]: gamma <= 1/2 is Corollary 6's safe side
        return f"{'[' if index == 0 else '('}{edges[index]:g},{edges[index + 1]:g}]"
    return f"[{edges[index]:g},{edges[index + 1]:g}{']' if last else ')'}"


def paired_rows(arms, stats, sequence, lengths, weights) -> list[dict]:
    """Per-position differences at the same delta, with the shared (paired) bootstrap."""
    num_seq, total = lengths.shape[0], int(lengths.sum())
    counts = per_sequence_sums(torch.ones(total, dtype=torch.float64), sequence, num_seq)
    index = {(arm.rule, arm.value): i for i, arm in enumerate(arms)}
    rows = []
    for rule, reference in PAIRS:
        for i, arm in enumerate(arms):
            j = index.get((reference, arm.value))
            if arm.rule != rule or j is None:
                continue
            for name, statistic in (("beta", "acceptance"), *((f, f) for f in DIVERGENCES)):
                difference = stats[name][i] - stats[name][j]
                # inf - inf (both put mass where q = 0): no measured difference, left out
                difference = torch.nan_to_num(difference, nan=0.0)
                estimate = ratio_estimate(
                    per_sequence_sums(difference[None], sequence, num_seq), counts, weights
                )
                rows.append(
                    _row(
                        arm,
                        f"paired_{statistic}_vs:{reference}",
                        estimate.value[0],
                        estimate.low[0],
                        estimate.high[0],
                        total,
                    )
                )
    return rows


def theorem3_findings(rows: list[dict]) -> list[str]:
    """One line per arm whose emitted law breaks Theorem 3's D_f(p || q) bound somewhere."""
    lines = []
    for row in rows:
        if row["statistic"] == "thm3_violation_share" and row["value"] > 0:
            worst = next(
                r["value"]
                for r in rows
                if r["statistic"] == "thm3_max_excess"
                and (r["rule"], r["parameter"]) == (row["rule"], row["parameter"])
            )
            lines.append(
                f"finding: {row['rule']} {row['parameter']}: D_f(law || q) > D_f(p || q) at "
                f"{100 * row['value']:.2f}% of positions (max excess {worst:.3g}; Theorem 3)"
            )
    return lines
