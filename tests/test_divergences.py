"""The gamma solvers: certified budget, tightness, closed forms, and the Jensen reduction."""

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cactus_bench.samplers import (
    DIVERGENCES,
    binary_divergence,
    exact_gamma,
    full_divergence,
    taylor_gamma,
)

Q_GRID = torch.tensor([0.0, 1e-12, 1e-6, 1e-3, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1 - 1e-9, 1.0])
DELTA_GRID = [0.0, 1e-6, 1e-3, 0.05, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0]


def _binary_kl_python(g: float, q: float) -> float:
    """Independent float arithmetic of the binary KL (no torch)."""
    total = 0.0
    if g > 0:
        total += g * math.log(g / q) if q > 0 else math.inf
    if g < 1:
        total += (1 - g) * math.log((1 - g) / (1 - q)) if q < 1 else math.inf
    return total


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_exact_gamma_respects_budget_and_is_tight_on_grid(divergence):
    for delta in DELTA_GRID:
        gamma = exact_gamma(Q_GRID, delta, divergence)
        value = binary_divergence(gamma, Q_GRID, divergence)
        assert torch.all(gamma >= Q_GRID.double() - 1e-15)
        assert torch.all(gamma <= 1.0)
        assert torch.all(value <= delta + 1e-6), (divergence, delta, value)
        # Largest root: any gamma below 1 sits on the boundary, and a step right breaks it.
        interior = gamma < 1 - 1e-9
        beyond = binary_divergence((gamma + 1e-8).clamp(max=1.0), Q_GRID, divergence)
        finite_interior = interior & torch.isfinite(beyond) & (Q_GRID > 0) & (Q_GRID < 1)
        assert torch.all(beyond[finite_interior] > delta - 1e-6)


@settings(max_examples=200, deadline=None)
@given(
    q=st.floats(min_value=0.0, max_value=1.0, allow_nan=False),
    delta=st.floats(min_value=0.0, max_value=6.0, allow_nan=False),
    divergence=st.sampled_from(DIVERGENCES),
)
@example(q=5e-324, delta=0.75, divergence="chi2")  # subnormal q: delta * q used to round up
def test_exact_gamma_budget_property(q, delta, divergence):
    q_t = torch.tensor([q], dtype=torch.float64)
    gamma = exact_gamma(q_t, delta, divergence)
    assert q - 1e-15 <= gamma.item() <= 1.0
    assert binary_divergence(gamma, q_t, divergence).item() <= delta + 1e-6


@settings(max_examples=100, deadline=None)
@given(
    q=st.floats(min_value=1e-6, max_value=1 - 1e-6),
    delta=st.floats(min_value=1e-4, max_value=3.0),
)
def test_kl_root_matches_independent_bisection(q, delta):
    gamma = exact_gamma(torch.tensor([q], dtype=torch.float64), delta, "kl").item()
    if _binary_kl_python(1.0 - 1e-15, q) <= delta:
        assert gamma == 1.0
        return
    lo, hi = q, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _binary_kl_python(mid, q) <= delta else (lo, mid)
    assert abs(gamma - lo) < 1e-9


@pytest.mark.parametrize("divergence", DIVERGENCES)
def test_proportional_rescaling_reduces_to_binary(divergence):
    """D_f(h || q) over the full vocabulary equals the binary divergence (Theorem 2)."""
    gen = torch.Generator().manual_seed(3)
    q = torch.softmax(torch.randn(40, 30, generator=gen, dtype=torch.float64) * 2, -1)
    n = torch.randint(0, 30, (40,), generator=gen)
    q_n = q.gather(1, n[:, None]).squeeze(1)
    gamma = exact_gamma(q_n, 0.4, divergence)
    h = q * ((1 - gamma) / (1 - q_n))[:, None]
    h.scatter_(1, n[:, None], gamma[:, None])
    torch.testing.assert_close(h.sum(-1), torch.ones(40, dtype=torch.float64))
    full = full_divergence(h, q, divergence)
    torch.testing.assert_close(full, binary_divergence(gamma, q_n, divergence))
    assert torch.all(full <= 0.4 + 1e-6)


def test_closed_forms():
    q = torch.tensor([0.2], dtype=torch.float64)
    assert exact_gamma(q, 0.1, "tv").item() == pytest.approx(0.3)
    assert exact_gamma(q, 0.1, "chi2").item() == pytest.approx(0.2 + math.sqrt(0.1 * 0.16))
    # Taylor (the paper's rule) is the chi^2 root at twice the budget.
    torch.testing.assert_close(taylor_gamma(q, 0.1), exact_gamma(q, 0.2, "chi2"))


def test_paper_worked_example():
    """Reference README: q(n) = .35 boosted to ~.66 at a KL of 0.20 nats."""
    q = torch.tensor([0.35], dtype=torch.float64)
    gamma = exact_gamma(q, 0.2, "kl").item()
    assert gamma == pytest.approx(0.66, abs=0.01)
    assert taylor_gamma(q, 0.2).item() == pytest.approx(0.652, abs=0.002)


def test_taylor_rule_can_exceed_budget_above_one_half():
    """Corollary 6: the closed form is only certified while gamma <= 1/2."""
    q = torch.linspace(0.05, 0.95, 91, dtype=torch.float64)
    gamma = taylor_gamma(q, 0.5)
    kl = binary_divergence(gamma, q, "kl")
    assert bool((kl > 0.5 + 1e-3).any())
    assert torch.all(kl[gamma <= 0.5] <= 0.5 + 1e-9)


def test_delta_zero_is_identity_and_negative_delta_raises():
    q = torch.rand(100, dtype=torch.float64)
    for divergence in DIVERGENCES:
        assert torch.equal(exact_gamma(q, 0.0, divergence), q)
    with pytest.raises(ValueError, match="delta"):
        exact_gamma(q, -0.1)
    with pytest.raises(ValueError, match="divergence"):
        exact_gamma(q, 0.1, "js")


def _root_60_digits(q: float, delta: float, divergence: str) -> float:
    """The largest gamma in [q, 1] with d_f(gamma; q) <= delta, by bisection at 60 digits."""
    import mpmath

    mpmath.mp.dps = 60
    q_mp = mpmath.mpf(q)

    def d(x):
        a, b = (x, q_mp) if divergence == "kl" else (q_mp, x)
        left = a * mpmath.log(a / b) if a > 0 else 0
        right = (1 - a) * mpmath.log((1 - a) / (1 - b)) if a < 1 else 0
        return left + right

    lo, hi = q_mp, mpmath.mpf(1)
    for _ in range(160):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if d(mid) > delta else (mid, hi)
    return float(lo)


_BOUND_Q = [1e-200, 1e-30, 1e-9, 3e-4, 0.02, 0.2, 0.45, 0.566, 0.8, 0.97, 1 - 1e-7, 1 - 1e-13]
_BOUND_DELTA = [1e-6, 1e-3, 0.05, 0.3, 1.0, 5.0, 100.0]


def _worst_root_error(divergence: str) -> float:
    """max |exact_gamma - root| over the grid where the root lies below 1 (no whole budget)."""
    worst = 0.0
    q = torch.tensor(_BOUND_Q, dtype=torch.float64)
    for delta in _BOUND_DELTA:
        gamma = exact_gamma(q, delta, divergence)
        assert torch.all(binary_divergence(gamma, q, divergence) <= delta)
        for i, q_i in enumerate(_BOUND_Q):
            if gamma[i].item() < 1.0:
                root = _root_60_digits(q_i, delta, divergence)
                worst = max(worst, abs(gamma[i].item() - root))
    return worst


@pytest.mark.parametrize("divergence", ["kl", "reverse_kl"])
def test_fixed_round_solver_is_within_1e12_of_the_true_root(divergence):
    """The solver runs a fixed number of rounds (no host read): this bound is what they buy."""
    assert _worst_root_error(divergence) <= 1e-12


def test_the_root_bound_catches_too_few_rounds(monkeypatch):
    """With 2 rounds instead of the solver's the bound above fails: it measures the count."""
    from cactus_bench.samplers import divergences

    monkeypatch.setattr(divergences, "_SOLVER_ROUNDS", 2)
    assert max(_worst_root_error("kl"), _worst_root_error("reverse_kl")) > 1e-12
