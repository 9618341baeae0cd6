"""Mentored decoding against a generic solver of its source's problem, on truncated laws.

The problem (Tran-Thien 2023, proof.pdf eq. 1-4; docs/rules.md, F1): maximise the acceptance
sum_i min(p_i, pi_i) over laws pi with KL(q || pi) <= delta. SLSQP solves it here in its epigraph
form, with no knowledge of the closed form: variables (pi, s) [2V], maximise sum s subject to
s <= p, s <= pi, sum pi = 1 and sum_{q > 0} q log(q / pi) <= delta. The problem is convex, so a
local optimum from a feasible start (pi = q, SpS) is the optimum; the rule must match it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cactus_bench.samplers import make_sampler

scipy_optimize = pytest.importorskip("scipy.optimize")  # a dev dependency (pyproject.toml)

GAP = 1e-3  # the tolerance on acceptance; SLSQP's own accuracy is ~1e-6 here
STARTS = (0.0, 0.25, 0.5, 0.75, 0.9)  # starting laws (1 - w) q + w p for the solver
BUDGETS = (0.01, 0.1, 0.5, 2.0)  # nats: from a sliver of the budget to past KL(q || p) at times


def solver_optimum(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """max sum min(p, pi) s.t. KL(q || pi) <= delta, by SLSQP from pi = q (module doc)."""
    vocab = len(p)
    support = q > 0
    floor = 1e-12  # pi > 0 where q > 0 keeps the logarithm defined (the optimum is far above)

    def budget(x):  # >= 0 when feasible
        pi = x[:vocab][support]
        return delta - float(np.sum(q[support] * np.log(q[support] / np.maximum(pi, floor))))

    def budget_grad(x):
        grad = np.zeros(2 * vocab)
        grad[:vocab][support] = q[support] / np.maximum(x[:vocab][support], floor)
        return grad

    eye = np.eye(vocab)
    constraints = [
        {"type": "eq", "fun": lambda x: np.sum(x[:vocab]) - 1.0,
         "jac": lambda x: np.concatenate([np.ones(vocab), np.zeros(vocab)])},
        {"type": "ineq", "fun": budget, "jac": budget_grad},
        {"type": "ineq", "fun": lambda x: x[:vocab] - x[vocab:],
         "jac": lambda x: np.hstack([eye, -eye])},
    ]  # fmt: skip
    bounds = [(floor if s else 0.0, 1.0) for s in support] + [(0.0, float(v)) for v in p]
    best = -np.inf
    # SLSQP can stall at the kink s = min(p, pi) from a single start (seen from pi = q on laws
    # where p = 0 < q): several starts between q and p, the best feasible end kept
    for weight in STARTS:
        start_pi = (1 - weight) * q + weight * p
        result = scipy_optimize.minimize(
            lambda x: -np.sum(x[vocab:]),
            np.concatenate([start_pi, np.minimum(p, start_pi)]),
            jac=lambda x: np.concatenate([np.zeros(vocab), -np.ones(vocab)]),
            bounds=bounds,
            constraints=constraints,
            method="SLSQP",
            options={"ftol": 1e-12, "maxiter": 1000},
        )
        feasible = budget(result.x) >= -1e-7 and abs(result.x[:vocab].sum() - 1) < 1e-7
        if result.success and feasible:
            best = max(best, float(np.minimum(p, result.x[:vocab]).sum()))
    assert best > -np.inf, "SLSQP found no feasible optimum from any start"
    return best


def truncated_laws(seed: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """p and q each zero on about a third of the vocabulary (top-k style truncation on both
    sides): q zero where p has mass, and p zero where q has mass (KL(q || p) infinite)."""
    rng = np.random.default_rng(seed)
    while True:
        p = rng.dirichlet(np.full(vocab, 0.8)) * (rng.random(vocab) < 0.7)
        q = rng.dirichlet(np.full(vocab, 0.8)) * (rng.random(vocab) < 0.65)
        if p.sum() > 0 and q.sum() > 0 and (p[q == 0] > 0).any():  # a zero of q under p
            return p / p.sum(), q / q.sum()


def kl(q: np.ndarray, law: np.ndarray) -> float:
    support = q > 0
    return float(np.sum(q[support] * np.log(q[support] / law[support])))


@pytest.mark.parametrize("seed", range(10))
def test_mentored_reaches_the_optimum_on_truncated_laws(seed):
    p, q = truncated_laws(seed, 4 + seed % 5)
    pt, qt = torch.from_numpy(p), torch.from_numpy(q)
    for delta in BUDGETS:
        rule = make_sampler("mentored", delta=delta)
        ours = rule.acceptance_probability(pt, qt).item()
        assert kl(q, rule.emitted_law(pt, qt).numpy()) <= delta * (1 + 1e-9)  # within budget
        assert ours == pytest.approx(solver_optimum(p, q, delta), abs=GAP), (seed, delta)


def test_truncated_acceptance_keeps_rising_with_the_budget():
    """The brief's failure: once every q > 0 token is accepted the first phase stalls; the
    budget then goes to the drafter's tokens outside q's support, so acceptance rises with delta
    and reaches 1 at KL(q || p)."""
    p = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.10], dtype=torch.float64)
    q = torch.tensor([0.55, 0.35, 0.10, 0.0, 0.0], dtype=torch.float64)
    spent = kl(q.numpy(), p.numpy())
    budgets = (0.01, 0.1, 0.3, spent)
    accepted = [
        make_sampler("mentored", delta=d).acceptance_probability(p, q).item() for d in budgets
    ]
    assert all(b > a + 1e-3 for a, b in zip(accepted, accepted[1:], strict=False)), accepted
    assert accepted[-1] == pytest.approx(1.0, abs=1e-12)
    for delta, value in zip(budgets[:-1], accepted, strict=False):
        assert value == pytest.approx(solver_optimum(p.numpy(), q.numpy(), delta), abs=GAP)
    # the second phase's draws of a ruled-out token are accepted with one probability c
    accept, _ = make_sampler("mentored", delta=0.3).plan(p, q)
    assert accept[3].item() == pytest.approx(accept[4].item(), rel=1e-12)
    assert 0 < accept[3].item() < 1
    assert math.isclose(
        kl(q.numpy(), make_sampler("mentored", delta=0.3).emitted_law(p, q).numpy()),
        0.3,
        rel_tol=1e-9,
    )
