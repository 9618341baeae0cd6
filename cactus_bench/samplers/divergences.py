"""Binary f-divergences and the largest admissible boost gamma of the drafted token.

Cactus (paper §2.2, Theorem 2) maximises min(1, h(n)/p(n)) subject to D_f(h || q) <= delta. The
optimum keeps h proportional to q off the drafted token n:

    h(n) = gamma,   h(x) = q(x) (1 - gamma) / (1 - q(n))   for x != n,

because for a fixed h(n) proportional rescaling minimises every f-divergence (Jensen). So
D_f(h || q) equals the divergence between two Bernoullis,

    d_f(gamma; q_n) = q_n f(gamma / q_n) + (1 - q_n) f((1 - gamma) / (1 - q_n)),       (Thm. 2)

which is convex in gamma, zero at gamma = q_n and increasing on [q_n, 1]. The rule needs the
largest gamma in [q_n, 1] with d_f <= delta. Every function here is elementwise on tensors of
any shape and computes in float64.

Conventions (f-divergence limits at q_n in {0, 1} follow 0 f(a/0) = a lim_{t->inf} f(t)/t):
  kl          f(t) = t log t        KL(h || q); no closed form: safeguarded Newton
  reverse_kl  f(t) = -log t         KL(q || h); no closed form: safeguarded Newton
  chi2        f(t) = (t - 1)^2      Pearson chi^2: gamma = q + sqrt(delta q (1 - q))
  hellinger   f(t) = (sqrt t - 1)^2 squared Hellinger without the 1/2 (range [0, 2]):
                                    closed form through the Bhattacharyya angle
  tv          f(t) = |t - 1| / 2    total variation: gamma = q + delta
"""

from __future__ import annotations

import math

import torch

from cactus_bench.samplers.catalogue import DIVERGENCE_NAMES

DIVERGENCES = DIVERGENCE_NAMES  # the torch-free catalogue lists them for config checks

_SOLVER_TOL = 1e-12  # bracket width at which the Newton/bisection solver stops
_NEWTON_MAX_ITERS = 100


def _xlogy_ratio(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x log(x / y) with 0 log(0 / y) = 0 and x log(x / 0) = inf for x > 0."""
    return torch.special.xlogy(x, x) - torch.special.xlogy(x, y)


def binary_divergence(gamma: torch.Tensor, q_n: torch.Tensor, divergence: str) -> torch.Tensor:
    """d_f(Bern(gamma) || Bern(q_n)), elementwise, float64 (Theorem 2's left-hand side)."""
    _check_divergence(divergence)
    g = gamma.to(torch.float64)
    q = q_n.to(torch.float64)
    if divergence == "kl":
        return _xlogy_ratio(g, q) + _xlogy_ratio(1 - g, 1 - q)
    if divergence == "reverse_kl":
        return _xlogy_ratio(q, g) + _xlogy_ratio(1 - q, 1 - g)
    if divergence == "chi2":
        # (g - q)^2 / q + (g - q)^2 / (1 - q), as ((g - q) / sqrt(q))^2: squaring a tiny g - q
        # first would round in the subnormal range (q = 5e-324 gave 1.0 for a true 0.75); a zero
        # denominator with a zero numerator is 0.
        diff = g - q
        left = torch.where(diff == 0, torch.zeros_like(g), (diff / q.sqrt()) ** 2)
        right = torch.where(diff == 0, torch.zeros_like(g), (diff / (1 - q).sqrt()) ** 2)
        return left + right
    if divergence == "hellinger":
        return (g.sqrt() - q.sqrt()) ** 2 + ((1 - g).sqrt() - (1 - q).sqrt()) ** 2
    return (g - q).abs()  # tv: (|g - q| + |(1 - g) - (1 - q)|) / 2


def full_divergence(h: torch.Tensor, q: torch.Tensor, divergence: str) -> torch.Tensor:
    """D_f(h || q) over the last axis for full distributions (used to check the reduction)."""
    _check_divergence(divergence)
    h = h.to(torch.float64)
    q = q.to(torch.float64)
    if divergence == "kl":
        return _xlogy_ratio(h, q).sum(-1)
    if divergence == "reverse_kl":
        return _xlogy_ratio(q, h).sum(-1)
    if divergence == "chi2":  # as in binary_divergence: no squaring of tiny differences
        diff = h - q
        return torch.where(diff == 0, torch.zeros_like(h), (diff / q.sqrt()) ** 2).sum(-1)
    if divergence == "hellinger":
        return ((h.sqrt() - q.sqrt()) ** 2).sum(-1)
    return 0.5 * (h - q).abs().sum(-1)


def taylor_gamma(q_n: torch.Tensor, delta: float) -> torch.Tensor:
    """The paper's closed form (Corollary 5): min(1, q + sqrt(2 delta q (1 - q))).

    It is the root of the 2nd-order Taylor expansion of the binary KL around q; the true KL can
    exceed delta once gamma > 1/2 (Corollary 6). Computes in the dtype of q_n (>= float32).
    """
    q = q_n.clamp(0.0, 1.0)
    return torch.clamp(q + torch.sqrt(2.0 * delta * q * (1.0 - q)), max=1.0)


def exact_gamma(
    q_n: torch.Tensor, delta: float | torch.Tensor, divergence: str = "kl"
) -> torch.Tensor:
    """Largest gamma in [q_n, 1] with d_f(gamma; q_n) <= delta (float64, same shape as q_n).

    gamma = 1 where the whole budget allows it (d_f(1; q_n) <= delta). Closed forms for chi2,
    hellinger and tv; kl and reverse_kl use a vectorised safeguarded Newton/bisection that
    returns the feasible end of a bracket narrower than 1e-12, so d_f(gamma) <= delta always.
    delta may be a tensor broadcastable against q_n (a grid of budgets, e.g. [D, 1, 1] against
    [N, V]): the result then has the broadcast shape, each element solved for its own delta.
    """
    _check_divergence(divergence)
    if isinstance(delta, torch.Tensor):
        return _exact_gamma_grid(q_n, delta, divergence)
    if delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    q = q_n.to(torch.float64).clamp(0.0, 1.0)
    if delta == 0:
        return q.clone()  # the only root of d_f = 0 is gamma = q: exactly SpS
    if divergence == "tv":
        return torch.clamp(q + delta, max=1.0)
    if divergence == "chi2":
        # sqrt(delta q (1 - q)) as a product of square roots: delta * q would round in the
        # subnormal range and overshoot the budget (q = 5e-324, delta = 0.75 certified 1.0)
        return torch.clamp(q + math.sqrt(delta) * q.sqrt() * (1 - q).sqrt(), max=1.0)
    if divergence == "hellinger":
        # With sqrt(q) = sin(theta), sqrt(gamma) = sin(phi): d = 2 - 2 cos(phi - theta), so the
        # boundary is phi = theta + arccos(1 - delta / 2), capped at pi/2 (gamma = 1).
        theta = torch.asin(q.sqrt())
        step = math.acos(max(-1.0, 1.0 - delta / 2.0))
        return torch.sin(torch.clamp(theta + step, max=math.pi / 2)) ** 2
    return _solve_boundary(q, delta, divergence)


def _exact_gamma_grid(q_n: torch.Tensor, delta: torch.Tensor, divergence: str) -> torch.Tensor:
    """exact_gamma for a tensor of budgets: the same formulas elementwise (torch, not math)."""
    delta = delta.to(torch.float64)
    if not bool((delta >= 0).all()):  # also rejects NaN
        raise ValueError(f"delta must be >= 0, got {delta.min().item()}")
    q, delta = torch.broadcast_tensors(q_n.to(torch.float64).clamp(0.0, 1.0), delta)
    q, delta = q.contiguous(), delta.contiguous()
    if divergence == "tv":
        gamma = torch.clamp(q + delta, max=1.0)
    elif divergence == "chi2":
        gamma = torch.clamp(q + delta.sqrt() * q.sqrt() * (1 - q).sqrt(), max=1.0)
    elif divergence == "hellinger":
        step = torch.acos(torch.clamp(1.0 - delta / 2.0, min=-1.0))
        gamma = torch.sin(torch.clamp(torch.asin(q.sqrt()) + step, max=math.pi / 2)) ** 2
    else:
        gamma = _solve_boundary(q, delta, divergence)
    return torch.where(delta == 0, q, gamma)


def _solve_boundary(q: torch.Tensor, delta: float, divergence: str) -> torch.Tensor:
    """Largest x in [q, 1] with g(x) = d_f(x; q) - delta <= 0, for kl and reverse_kl.

    g is convex and increasing on [q, 1]. Newton from a point right of the root converges
    monotonically from the right; a bracket [lo, hi] with g(lo) <= 0 < g(hi) catches steps that
    leave it (replaced by bisection). The root estimate is then nudged left by 1e-12 and checked:
    any element still infeasible (rare) is finished by plain bisection, so d_f <= delta always.
    """
    one = torch.ones_like(q)
    whole_budget = binary_divergence(one, q, divergence) <= delta
    # KL(gamma; 0) = inf for every gamma > 0: the root is q = 0 itself (bisection would take ~40
    # steps to say so).
    pinned = (q == 0) if divergence == "kl" else torch.zeros_like(whole_budget)
    lo, hi = q.clone(), one.clone()
    x = torch.clamp(taylor_gamma(q, delta), max=1.0 - 1e-12)  # warm start near the root
    x = torch.where(x > lo, x, (lo + hi) / 2)
    active = ~whole_budget & ~pinned & (hi - lo > _SOLVER_TOL)
    for _ in range(_NEWTON_MAX_ITERS):
        if not bool(active.any()):
            break
        g = binary_divergence(x, q, divergence) - delta
        lo = torch.where(active & (g <= 0), x, lo)
        hi = torch.where(active & (g > 0), x, hi)
        step = g / _binary_divergence_slope(x, q, divergence)
        newton = x - step
        inside = torch.isfinite(newton) & (newton > lo) & (newton < hi)
        # A step below the tolerance has converged even when rounding puts it on the bracket's
        # edge (g = +1e-16 at the root makes newton == hi): bisecting on from lo would cost ~40
        # more iterations for nothing. The check below certifies the budget either way.
        settled = torch.isfinite(newton) & (step.abs() <= _SOLVER_TOL)
        x = torch.where(active, torch.where(inside | settled, newton, (lo + hi) / 2), x)
        converged = (hi - lo <= _SOLVER_TOL) | settled
        active = active & ~converged
    candidate = torch.maximum(lo, torch.where(whole_budget, lo, x - _SOLVER_TOL))
    candidate_ok = binary_divergence(candidate, q, divergence) <= delta
    lo = torch.where(candidate_ok, candidate, lo)
    hi = torch.where(candidate_ok, hi, candidate)
    pending = ~whole_budget & ~pinned & ~candidate_ok
    while bool(pending.any()) and bool(((hi - lo) > _SOLVER_TOL)[pending].any()):
        mid = (lo + hi) / 2
        ok = binary_divergence(mid, q, divergence) <= delta
        lo = torch.where(pending & ok, mid, lo)
        hi = torch.where(pending & ~ok, mid, hi)
        pending = pending & (hi - lo > _SOLVER_TOL)
    return torch.where(whole_budget, one, torch.where(pinned, q, lo))


def _binary_divergence_slope(x: torch.Tensor, q: torch.Tensor, divergence: str) -> torch.Tensor:
    """d/dx d_f(x; q) for the two divergences solved numerically."""
    if divergence == "kl":
        return torch.log(x) - torch.log(q) - torch.log1p(-x) + torch.log1p(-q)
    # reverse_kl: d/dx [q log(q/x) + (1-q) log((1-q)/(1-x))] = -q/x + (1-q)/(1-x)
    return -q / x + (1 - q) / (1 - x)


def _check_divergence(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {', '.join(DIVERGENCES)}; got {divergence!r}")
