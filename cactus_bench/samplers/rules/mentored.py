"""Mentored decoding (Tran-Thien 2023, proof.pdf eq. 2, 23-28 and Algorithm 1): the most accepting
rule whose emitted law pi keeps KL(q || pi) <= delta (the target-to-result direction).

With t = q / p, the law is pi = median(q / beta, p, q / alpha) elementwise (RULES.md §1):

    t <= alpha:          pi = q / alpha   (accepted with q / (alpha p), never recovered)
    alpha < t < beta:    pi = p           (always accepted)
    t >= beta:           pi = q / beta    (always accepted, and recovered into)

beta is tied to alpha by sum (p - q / alpha)+ = sum (q / beta - p)+ (eq. 25, 28), and alpha is
the one value that spends the budget exactly: KL(q || pi) = delta (eq. 7), decreasing in alpha
from KL(q || p) to 0 at alpha = 1 (SpS). When delta >= KL(q || p) every draft is accepted and
pi = p (the source's shortcut 2). The source's notebook bisects alpha to within +-20 % of the
budget (tol 0.2, 10 steps); here alpha is searched in log space (16 points per round, 12
rounds: about float64 precision) and the feasible end kept, so KL(q || pi) <= delta holds and
is tight. The bonus token is drawn from q.
"""

from __future__ import annotations

from cactus_bench.samplers.params import DELTA, RuleInfo
from cactus_bench.samplers.rules._builder import Builder

_POINTS, _ROUNDS = 16, 12  # 16-ary search on log alpha: 16**12 ~ 3e14 narrower bracket


class Mentored(Builder):
    info = RuleInfo(
        "mentored",
        "mentored decoding: max acceptance s.t. KL(q || pi) <= delta, alpha solved per position",
        (DELTA,),
    )

    def __init__(self, delta: float = 0.1):
        self._store(delta=delta)

    def plan(self, p, q, p_bar, q_bar):
        from cactus_bench.samplers.kernel import against_target

        return against_target(p, mentored_target(p, q, self.delta))


def mentored_target(p, q, delta: float):
    """[..., V] normalised float64 rows -> pi [..., V] with KL(q || pi) <= delta (module doc)."""
    import torch

    inf = torch.tensor(torch.inf, dtype=p.dtype, device=p.device)
    one = torch.ones_like(p)
    ratio = torch.where(q > 0, torch.where(p > 0, q / torch.where(p > 0, p, one), inf), 0 * q)
    t, order = ratio.sort(-1, descending=True)  # [..., V] ratios, largest first
    p_sorted, q_sorted = p.gather(-1, order), q.gather(-1, order)
    q_top, p_top = q_sorted.cumsum(-1), p_sorted.cumsum(-1)  # mass on the j largest ratios
    # g(b) = sum_{t > b} (q / b - p) decreases in b; its value at the next breakpoint t_{j+1}
    # with the j largest ratios in the tail is G_j. beta lies on the first piece with G_j >= M.
    tail_at_next = q_top[..., :-1] / t[..., 1:] - p_top[..., :-1]
    g_next = torch.cat([tail_at_next, inf.expand_as(t[..., :1])], -1)  # [..., V]
    infinite = (t == inf).sum(-1, keepdim=True)  # p = 0 < q: always in the tail
    first = infinite.clamp(min=1) - 1  # index of the smallest admissible tail (>= 1 token)
    index = torch.arange(t.shape[-1], device=p.device)
    entropy = torch.special.xlogy(q, q).sum(-1, keepdim=True)
    # Candidates alpha along a new axis -2: rows [..., 1, V] against log alpha [..., S, 1].
    rows = [x.unsqueeze(-2) for x in (p, q, t, p_sorted, q_sorted, q_top, p_top, g_next, first)]
    p1, q1, t1, ps1, qs1, q_top1, p_top1, g1, first1 = rows

    def target(log_alpha):  # [..., S, 1] -> pi [..., S, V]
        alpha = log_alpha.exp()
        spill = ((ps1 - qs1 / alpha) * (t1 < alpha)).sum(-1, keepdim=True).clamp(min=0)  # M
        ok = (g1 >= spill) & (index >= first1)  # [..., S, V]
        piece = ok.to(torch.int8).argmax(-1, keepdim=True)
        size = (*piece.shape[:-1], q_top1.shape[-1])
        q_tail = q_top1.expand(size).gather(-1, piece)
        beta = q_tail / (p_top1.expand(size).gather(-1, piece) + spill)
        return torch.maximum(torch.minimum(p1, q1 / alpha), q1 / beta)

    def kl(pi):  # KL(q || pi) [..., S, 1]
        return entropy.unsqueeze(-2) - torch.special.xlogy(q1, pi).sum(-1, keepdim=True)

    finite = torch.where((ratio > 0) & (ratio < inf), ratio, inf)
    smallest = finite.min(-1, keepdim=True).values  # below it the law no longer changes
    low = torch.where(smallest < 1, smallest.log(), torch.zeros_like(smallest)).unsqueeze(-2)
    high = torch.zeros_like(low)  # alpha = 1: SpS, KL = 0
    steps = torch.arange(1, _POINTS, dtype=p.dtype, device=p.device).unsqueeze(-1) / _POINTS
    for _ in range(_ROUNDS):  # a _POINTS-ary search: KL(q || pi) decreases in alpha
        points = low + (high - low) * steps  # [..., S, 1]
        feasible = kl(target(points)) <= delta
        # the first feasible point bounds alpha above; the point before it bounds it below
        count = (~feasible).sum(-2, keepdim=True)  # infeasible points come first
        padded = torch.cat([low, points, high], -2)
        low, high = padded.gather(-2, count), padded.gather(-2, count + 1)
    pi = target(high).squeeze(-2)
    pi = torch.where(kl(p.unsqueeze(-2)).squeeze(-2) <= delta, p, pi)  # the drafter law fits
    return pi / pi.sum(-1, keepdim=True)


BUILDERS = (Mentored,)
