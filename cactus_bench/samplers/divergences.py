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

from cactus_bench.samplers.params import DIVERGENCE_NAMES

DIVERGENCES = DIVERGENCE_NAMES  # the torch-free catalogue lists them for config checks

# Rounds of `_solve_boundary`: 4 reach the 60-digit root within 1e-13 for delta >= 1e-6 on the
# tested grid (3 miss by 1e-6); 6 leave a margin. Fixed, so the solver never reads the host.
_SOLVER_ROUNDS = 6
_NUDGE = 1e-13  # the chord's point stays this far left of hi (rounding near the root)
_T_MAX = 53 * math.log(2)  # t = -log(1 - x) of x = 1 - 2**-53, the largest float64 below 1


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
    hellinger and tv; kl and reverse_kl use a fixed number of safeguarded Newton/chord rounds that
    return the feasible end of a bracket (within 1e-12 of the root), so d_f(gamma) <= delta.
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

    A fixed number of rounds and no host read, so the solver can be captured in a CUDA graph.
    g is convex and increasing on [q, 1] (reverse_kl in t = -log(1 - x), where it is convex too
    and nearly linear, so roots near 1 take no more rounds). A bracket [lo, hi] keeps
    g(lo) <= 0 < g(hi); each round tries the nearer of the tangents from lo and hi (both land
    right of the root: a convex g lies above its tangents) and then the chord's zero (left of
    it: the chord lies above g), nudged >= 1e-13 left of hi so that rounding near the root
    cannot stall it; a point outside the bracket is replaced by the midpoint. Only points whose
    computed g <= 0 become lo, which is returned: d_f(gamma) <= delta always. The error bound
    (|gamma - root| <= 1e-12 for delta >= 1e-6) is tested against a 60-digit root.
    """
    one = torch.ones_like(q)
    whole_budget = binary_divergence(one, q, divergence) <= delta
    # KL(gamma; 0) = inf for every gamma > 0: the root is q = 0 itself.
    pinned = (q == 0) if divergence == "kl" else torch.zeros_like(whole_budget)
    if divergence == "kl":
        to_x, to_t = (lambda t: t), (lambda x: x)
        lo, hi = q.clone(), one.clone()
    else:  # reverse_kl: d = -H(q) - q log(1 - e^-t) + (1 - q) t >= (1 - q) t - H(q)
        to_x, to_t = (lambda t: -torch.expm1(-t)), (lambda x: -torch.log1p(-x))
        entropy = -(torch.special.xlogy(q, q) + torch.special.xlogy(1 - q, 1 - q))
        lo = to_t(q)
        # past (delta + H) / (1 - q) + 1 the budget is spent; past _T_MAX x rounds to 1
        hi = torch.clamp((delta + entropy) / (1 - q) + 1, max=_T_MAX)

    def excess(t):  # g at t, float64
        return binary_divergence(to_x(t), q, divergence) - delta

    def slope(t):  # dg/dt
        x = to_x(t)
        if divergence == "kl":
            return torch.log(x) - torch.log(q) - torch.log1p(-x) + torch.log1p(-q)
        return (1 - q) - q * (1 - x) / x  # reverse_kl: dg/dx (1 - x)

    def inside(t, lo, hi):  # False for NaN and the infinities too
        return (t > lo) & (t < hi)

    def narrow(t, lo, hi, g_lo, g_hi):
        g = excess(t)
        left, right = (g <= 0) & (t > lo), (g > 0) & (t < hi)
        return (
            torch.where(left, t, lo),
            torch.where(right, t, hi),
            torch.where(left, g, g_lo),
            torch.where(right, g, g_hi),
        )

    g_lo, g_hi = excess(lo), excess(hi)
    lo, g_lo = torch.where(g_hi <= 0, hi, lo), torch.where(g_hi <= 0, g_hi, g_lo)
    start = to_t(taylor_gamma(q, delta).clamp(max=1.0 - 1e-12))  # warm start near the root
    start = torch.where(inside(start, lo, hi), start, (lo + hi) / 2)
    lo, hi, g_lo, g_hi = narrow(start, lo, hi, g_lo, g_hi)
    # The tangent at lo lands right of the root: a near hi when the warm start was feasible.
    tangent = lo - g_lo / slope(lo)
    lo, hi, g_lo, g_hi = narrow(
        torch.where(inside(tangent, lo, hi), tangent, hi), lo, hi, g_lo, g_hi
    )
    for _ in range(_SOLVER_ROUNDS):
        right = hi - g_hi / slope(hi)
        right = torch.where(inside(right, lo, hi), right, (lo + hi) / 2)
        lo, hi, g_lo, g_hi = narrow(right, lo, hi, g_lo, g_hi)
        chord = lo - g_lo * (hi - lo) / (g_hi - g_lo)
        nudged = to_t(to_x(hi) - _NUDGE)
        chord = torch.where(inside(chord, lo, hi), chord, hi)
        chord = torch.where(inside(nudged, lo, hi), torch.minimum(chord, nudged), chord)
        chord = torch.where(chord < hi, chord, (lo + hi) / 2)
        lo, hi, g_lo, g_hi = narrow(chord, lo, hi, g_lo, g_hi)
    return torch.where(whole_budget, one, torch.where(pinned, q, to_x(lo)))


def _check_divergence(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence must be one of {', '.join(DIVERGENCES)}; got {divergence!r}")
