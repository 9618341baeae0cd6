"""Mentored decoding (Tran-Thien 2023, proof.pdf eq. 2, 23-28 and Algorithm 1): the most accepting
rule whose emitted law pi keeps KL(q || pi) <= delta (the target-to-result direction).

The source's problem: maximise the acceptance sum_i min(p_i, pi_i) over laws pi subject to
KL(q || pi) <= delta (eq. 1-4; GenSpecSample reaches min(p, pi) for any pi). With t = q / p the
proof's solution is pi = median(q / beta, p, q / alpha) elementwise (docs/rules.md, F1):

    t <= alpha:          pi = q / alpha   (accepted with q / (alpha p), never recovered)
    alpha < t < beta:    pi = p           (always accepted)
    t >= beta:           pi = q / beta    (always accepted, and recovered into)

beta is tied to alpha by sum (p - q / alpha)+ = sum (q / beta - p)+ (eq. 25, 28), and alpha is
the one value that spends the budget exactly: KL(q || pi) = delta (eq. 7), decreasing in alpha
from its value at the smallest positive ratio t_min to 0 at alpha = 1 (SpS). Here alpha is
searched in log space (16 points per round, 12 rounds: about float64 precision) and the feasible
end kept, so KL(q || pi) <= delta holds and is tight. The source's notebook bisects alpha to
within +-20 % of the budget (tol 0.2, 10 steps) and adds 1e-12 to both laws, so q > 0 there.

Where q has zeros under the drafter (truncated laws: P0 = sum_{q = 0} p > 0) the proof's form
stops short. The tokens with q = 0 add nothing to KL(q || pi) (q log(q / pi) = 0 there, whatever
pi), so they may take target mass; the first phase never gives them any (q / alpha = 0), and at
alpha = t_min, every q > 0 token fully accepted, the budget left can no longer be spent. The KKT
conditions of the problem above (multiplier lambda on the budget, mu on sum pi = 1; the gain of
mass at token i is d min(p_i, pi_i) + lambda q_i / pi_i) give two phases [derived here]:

  1. mu = 1 + lambda alpha > 1: a q = 0 token's marginal gain 1 (while pi_i < p_i) is below mu,
     so pi_i = 0: the proof's law above, for delta up to its KL at alpha = t_min.
  2. mu = 1, lambda = 1 / beta: no q > 0 token sits below p (that would need 1 + lambda t = 1),
     so pi = max(p, q / beta) where q > 0, and the q = 0 tokens share the rest, 1 - sum max(p,
     q / beta), each at most p_i; their gain is 1 per unit whoever gets it, so any split is
     optimal and this one takes pi = c p (accepted with probability c, the limit of q = eps p).
     KL(q || pi) = sum_{q > 0} q min(log t, log beta) increases with beta: solved exactly on its
     linear pieces; c runs from 0 to 1 (pi = p, KL(q || p)) as beta runs up to max t.

So KL(q || pi) = delta is spent in both phases (to rounding in the second) and acceptance keeps
rising with delta on truncated laws. When delta >= KL(q || p) every draft is accepted and pi = p
(the source's shortcut 2). The bonus token is drawn from q.
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
        from cactus_bench.samplers.kernel import against_target  # lazy: loads torch

        return against_target(p, mentored_target(p, q, self.delta))


def mentored_target(p, q, delta: float):
    """[..., V] normalised float64 rows -> pi [..., V] with KL(q || pi) <= delta (module doc)."""
    import torch  # lazy: keeps torch out of the catalogue

    inf = p.new_full((), torch.inf)  # a fill, not a copy from the host (capturable)
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
    # Second phase (module doc): the budget left once every q > 0 token is accepted goes to the
    # drafter's tokens that q rules out; empty (scale <= 0) unless q has zeros under p.
    zeros_pi, scale = _spend_on_zeros(p, q, t, q_sorted, q_top, delta)
    pi = torch.where(scale > 0, zeros_pi, pi)
    pi = torch.where(kl(p.unsqueeze(-2)).squeeze(-2) <= delta, p, pi)  # the drafter law fits
    return pi / pi.sum(-1, keepdim=True)


def _spend_on_zeros(p, q, t, q_sorted, q_top, delta: float):
    """The second phase's law and c (module doc): [..., V] pi, [..., 1] c (c <= 0: not here).

    With every q > 0 token accepted (alpha below every ratio), KL(q || pi) reads only the tail
    beta: K(b) = sum_{q > 0} q min(log t, b), b = log beta, piecewise linear and increasing.
    Sorted by ratio, largest first (t, q_sorted, q_top as in `mentored_target`), the piece with
    the i largest ratios above b gives K(b) = b Q_i + sum_{k >= i} q_k log t_k, so the b that
    spends delta is solved on the piece whose ends bracket it.
    """
    import torch  # lazy: keeps torch out of the catalogue

    log_t = torch.where(q_sorted > 0, t.log(), torch.zeros_like(t))  # [..., V]; 0: no term
    inf_t = torch.isinf(log_t)  # p = 0 < q: always in the tail, at any finite b
    terms = torch.where(inf_t, torch.zeros_like(t), q_sorted * log_t)
    rest = terms.flip(-1).cumsum(-1).flip(-1)  # [..., V] sum_{k >= i} q_k log t_k
    above = q_top - q_sorted  # [..., V] Q_i: q's mass on the i largest ratios (k < i)
    # K at the breakpoint b = log t_i; +inf where an infinite ratio is not yet in the tail
    at_break = torch.where(inf_t, torch.full_like(t, torch.inf), rest + log_t * above)
    at_break = torch.where(q_sorted > 0, at_break, torch.full_like(t, -torch.inf))  # no piece
    # the first (largest) breakpoint at which K <= delta: b lies between it and the one before
    piece = (at_break <= delta).to(torch.int8).argmax(-1, keepdim=True)  # [..., 1]
    mass = above.gather(-1, piece)
    log_beta = (delta - rest.gather(-1, piece)) / torch.where(mass > 0, mass, torch.ones_like(mass))
    beta = log_beta.exp()
    positive = q > 0
    kept = torch.where(positive, torch.maximum(p, q / beta), torch.zeros_like(p))
    ruled_out = (p * ~positive).sum(-1, keepdim=True)  # P0: the drafter's mass where q = 0
    scale = (1 - kept.sum(-1, keepdim=True)) / torch.where(
        ruled_out > 0, ruled_out, torch.ones_like(ruled_out)
    )
    scale = torch.where((ruled_out > 0) & (mass > 0), scale.clamp(max=1.0), -torch.ones_like(scale))
    return torch.where(positive, kept, scale.clamp(min=0) * p), scale


BUILDERS = (Mentored,)
