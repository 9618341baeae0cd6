"""Exact acceptance probability and emitted law of one drafted token, batched over positions.

`AcceptanceRule.output_distribution` builds the law of one position from a [V, V] matrix (one
row per candidate draft), which is the reference but costs O(V^2). The functions here give the
same two quantities for many positions at once in O(V log V) per position, for the rules whose
target boosts the drafted token and keeps q's shape elsewhere (paper §2.2, Theorem 2):

    h_n(n) = gamma_n,   h_n(x) = s_n q(x) for x != n,   s_n = (1 - gamma_n) / (1 - q(n))

(SpS: gamma_n = q(n); Cactus: the Taylor or exact root). With the acceptance min(1, h_n(n)/p(n))
and the recovery norm(max(0, h_n - p)) of `verify`:

    beta    = sum_n p(n) min(1, gamma_n / p(n)) = sum_n min(p(n), gamma_n)
    law(x)  = min(p(x), gamma_x) + sum_n c_n [x != n] max(0, s_n q(x) - p(x)),
    c_n     = max(0, p(n) - gamma_n) / Z_n,    Z_n = sum_x max(0, h_n(x) - p(x)).

The sum over n is the expensive part. max(0, s q(x) - p(x)) is positive exactly when
s > t_x = p(x) / q(x), so with the s_n sorted it is q(x) * sum_{s_n > t_x} c_n s_n -
p(x) * sum_{s_n > t_x} c_n (two suffix sums and one searchsorted), and Z_n likewise from the
t_x sorted. Everything broadcasts: gamma may carry leading parameter-grid axes ([D, N, V] against
p, q of [N, V]). Float64 throughout; rounding is kept at the level of a few ulps of 1, and the
law is renormalised to sum to one (verify falls back to q where rounding empties a recovery row;
here that mass is spread proportionally instead, a difference of rounding size).
"""

from __future__ import annotations

import torch


def normalised(
    p: torch.Tensor, q: torch.Tensor, check: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., V] rows as float64 distributions (each divided by its sum); checks the inputs
    (host reads) unless check=False."""
    if p.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"p and q must share the vocabulary axis; got {tuple(p.shape)} and {tuple(q.shape)}"
        )
    p64, q64 = p.to(torch.float64), q.to(torch.float64)
    for name, rows in (("p", p64), ("q", q64)) if check else ():
        if not bool(torch.isfinite(rows).all()) or bool((rows < 0).any()):
            raise ValueError(f"{name} must hold finite non-negative probabilities")
        if bool((rows.sum(-1) <= 0).any()):
            raise ValueError(f"{name} has a row with no positive mass")
    return p64 / p64.sum(-1, keepdim=True), q64 / q64.sum(-1, keepdim=True)


def boosted_acceptance(p: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """beta = sum_n min(p(n), h_n(n)): [..., V] (broadcasting) -> [...] float64."""
    return torch.minimum(p, gamma).sum(-1)


def _prefix(values: torch.Tensor) -> torch.Tensor:
    """[..., V] -> [..., V + 1] cumulative sums with a leading 0 (sum of the first i entries)."""
    return torch.nn.functional.pad(values.cumsum(-1), (1, 0))


def boosted_law(p: torch.Tensor, q: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """The exact law of the emitted token for targets that boost n to gamma_n (module doc).

    p, q: [..., V] normalised float64 rows; gamma: h_n(n) for every candidate n, broadcastable
    against them (e.g. [D, N, V] for a grid of D budgets). Returns the broadcast shape, float64.
    """
    p, q, gamma = torch.broadcast_tensors(p, q, gamma)
    accepted = torch.minimum(p, gamma)  # mass emitted by accepting the draft x itself
    rejected = p - accepted  # [..., V] w_n = p(n) (1 - a_n)
    one = torch.ones_like(q)
    scale = torch.where(q < 1, (1 - gamma) / torch.where(q < 1, 1 - q, one), 0 * q)  # s_n
    # The x = n term of sum_x max(0, s_n q(x) - p(x)); zero whenever gamma_n >= q(n) (every rule
    # here), non-zero for a target that lowers h(n).
    self_term = (scale * q - p).clamp(min=0)

    # Z_n: sum_x max(0, s_n q(x) - p(x)) = s_n Q(s_n) - P(s_n), Q, P summed over t_x < s_n.
    threshold = torch.where(q > 0, p / torch.where(q > 0, q, one), torch.full_like(q, torch.inf))
    t_sorted, t_order = threshold.sort(-1)
    q_prefix = _prefix(q.gather(-1, t_order))
    p_prefix = _prefix(p.gather(-1, t_order))
    below = torch.searchsorted(t_sorted.contiguous(), scale.contiguous())  # count t_x < s_n
    positive = scale * q_prefix.gather(-1, below) - p_prefix.gather(-1, below)
    normaliser = positive.clamp(min=0) - self_term + (gamma - p).clamp(min=0)
    # Z_n >= w_n holds exactly (Z_n = sum_x max(0, p(x) - h_n(x)) >= p(n) - gamma_n).
    normaliser = torch.maximum(normaliser, rejected)
    weight = torch.where(rejected > 0, rejected / torch.where(rejected > 0, normaliser, one), 0 * q)

    # Recovery mass at x: sum over n with s_n > t_x of c_n (s_n q(x) - p(x)), minus n = x.
    s_sorted, s_order = scale.sort(-1)
    c_prefix = _prefix(weight.gather(-1, s_order))
    cs_prefix = _prefix((weight * scale).gather(-1, s_order))
    first_above = torch.searchsorted(s_sorted.contiguous(), threshold.contiguous(), right=True)
    c_above = c_prefix[..., -1:] - c_prefix.gather(-1, first_above)
    cs_above = cs_prefix[..., -1:] - cs_prefix.gather(-1, first_above)
    recovered = (q * cs_above - p * c_above - weight * self_term).clamp(min=0)
    recovered = torch.where(q > 0, recovered, 0 * q)  # t_x = inf: exactly no recovery mass
    law = accepted + recovered
    return law / law.sum(-1, keepdim=True)


def threshold_law(
    p: torch.Tensor, accept: torch.Tensor, recovery: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(beta, law) for rules whose acceptance and recovery do not depend on the draft n.

    accept: [..., V] a_x in [0, 1]; recovery: [..., V] non-negative weights of the one recovery
    distribution (normalised here). law = p a + (1 - beta) norm(recovery).
    """
    beta = (p * accept).sum(-1)
    total = recovery.sum(-1, keepdim=True)  # 0 only where nothing is rejected (beta = 1)
    recovery = recovery / torch.where(total > 0, total, torch.ones_like(total))
    rejected = (1 - beta).clamp(min=0)  # 1 - beta rounds to -1e-17 when every draft is accepted
    law = p * accept + rejected.unsqueeze(-1) * recovery
    return beta, law
