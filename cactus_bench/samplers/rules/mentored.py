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
budget (tol 0.2, 10 steps); here alpha is bisected in log space to float64 precision and the
feasible end kept, so KL(q || pi) <= delta holds and is tight. The bonus token is drawn from q.
"""

from __future__ import annotations

from cactus_bench.samplers.params import DELTA, RuleInfo
from cactus_bench.samplers.rules._builder import Builder

_BISECTIONS = 64  # halvings of the log-alpha bracket: below float64 resolution of alpha


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
    q_top = q.gather(-1, order).cumsum(-1)  # mass of q on the j largest ratios (j = 1..V)
    p_top = p.gather(-1, order).cumsum(-1)
    # g(b) = sum_{t > b} (q / b - p) decreases in b; its value at the next breakpoint t_{j+1}
    # with the j largest ratios in the tail is G_j. beta lies on the first piece with G_j >= M.
    tail_at_next = q_top[..., :-1] / t[..., 1:] - p_top[..., :-1]
    g_next = torch.cat([tail_at_next, inf.expand_as(t[..., :1])], -1)  # [..., V]
    infinite = (t == inf).sum(-1, keepdim=True)  # p = 0 < q: always in the tail
    first = infinite.clamp(min=1) - 1  # index of the smallest admissible tail (>= 1 token)
    index = torch.arange(t.shape[-1], device=p.device)

    def target(log_alpha):  # [..., 1] -> pi [..., V]
        alpha = log_alpha.exp()
        low = t < alpha
        spill = ((p.gather(-1, order) - q.gather(-1, order) / alpha) * low).sum(-1, keepdim=True)
        spill = spill.clamp(min=0)  # M = 1 - R: the mass rejected drafts hand to the residual
        piece = ((g_next >= spill) & (index >= first)).to(torch.int8).argmax(-1, keepdim=True)
        beta = q_top.gather(-1, piece) / (p_top.gather(-1, piece) + spill)
        return torch.maximum(torch.minimum(p, q / alpha), q / beta)

    def kl(pi):
        return (torch.special.xlogy(q, q) - torch.special.xlogy(q, pi)).sum(-1, keepdim=True)

    finite = torch.where((ratio > 0) & (ratio < inf), ratio, inf)
    smallest = finite.min(-1, keepdim=True).values  # below it the law no longer changes
    low = torch.where(smallest < 1, smallest.log(), torch.zeros_like(smallest))
    high = torch.zeros_like(low)  # alpha = 1: SpS, KL = 0
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        feasible = kl(target(middle)) <= delta
        high = torch.where(feasible, middle, high)
        low = torch.where(feasible, low, middle)
    pi = target(high)
    pi = torch.where(kl(p) <= delta, p, pi)  # the whole drafter law fits the budget
    return pi / pi.sum(-1, keepdim=True)


BUILDERS = (Mentored,)
