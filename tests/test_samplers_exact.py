"""Exact per-position statistics of every rule: acceptance probability and emitted law, batched.

References: `output_distribution` (the [V, V] brute force over candidate drafts), Monte Carlo of
`verify`, and the definition beta = sum_x p(x) min(1, h_x(x) / p(x)) with h_x from the rule's
own `target_row`.
"""

import pytest
import torch
from helpers.laws import P_SMALL, Q_SMALL, RULE_IDS, RULES

from cactus_bench.samplers import (
    DIVERGENCES,
    binary_divergence,
    exact_gamma,
    full_divergence,
    make_sampler,
    taylor_gamma,
)
from cactus_bench.samplers.exact import boosted_acceptance, boosted_law, normalised
from cactus_bench.samplers.target_rules import TargetRule

pytestmark = pytest.mark.usefixtures("single_thread")


def _pairs(count: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[count, vocab] float64 rows with real disagreement and zeros on both sides."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    p = p * (torch.rand(count, vocab, generator=gen) > 0.3)  # truncated drafter rows
    q = q * (torch.rand(count, vocab, generator=gen) > 0.3)  # truncated verifier rows
    p[:, 0] += 1e-3  # no empty row
    q[:, 1] += 1e-3
    if vocab == P_SMALL.shape[0]:
        p[0], q[0] = P_SMALL, Q_SMALL
    q[1] = torch.zeros(vocab, dtype=torch.float64).index_fill(0, torch.tensor([3]), 1.0)  # q = 1
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_emitted_law_equals_output_distribution(name, params):
    rule = make_sampler(name, **params)
    p, q = _pairs(40, 6, seed=1)
    law = rule.emitted_law(p, q)  # [40, 6] in one call
    for row in range(p.shape[0]):
        reference = rule.output_distribution(p[row], q[row])
        torch.testing.assert_close(law[row], reference, atol=1e-12, rtol=0)


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_acceptance_probability_matches_monte_carlo_of_verify(name, params):
    rule = make_sampler(name, **params)
    samples = 50_000  # sigma <= 0.0023; the exact-root rules solve one root per sample
    pairs = [(P_SMALL, Q_SMALL), tuple(rows[2] for rows in _pairs(3, 6, seed=2))]
    for p, q in pairs:
        beta = rule.acceptance_probability(p, q).item()
        gen = torch.Generator().manual_seed(7)
        vocab = p.shape[0]
        ids = torch.multinomial(p.float().expand(samples, vocab), 1, True, generator=gen)
        out = rule.verify(
            ids, p.float().expand(samples, 1, vocab), q.float().expand(samples, 2, vocab), gen
        )
        measured = out.num_accepted.double().mean().item()
        sigma = max((beta * (1 - beta) / samples) ** 0.5, 1e-9)
        assert abs(measured - beta) < 3.3 * sigma + 1e-9, (measured, beta)  # 99.9 %


def test_monte_carlo_acceptance_check_is_sensitive():
    """Cactus's measured acceptance is far outside SpS's predicted interval."""
    samples = 200_000
    gen = torch.Generator().manual_seed(7)
    ids = torch.multinomial(P_SMALL.float().expand(samples, 6), 1, True, generator=gen)
    out = make_sampler("cactus", delta=0.75).verify(
        ids, P_SMALL.float().expand(samples, 1, 6), Q_SMALL.float().expand(samples, 2, 6), gen
    )
    beta_sps = make_sampler("sps").acceptance_probability(P_SMALL, Q_SMALL).item()
    sigma = (beta_sps * (1 - beta_sps) / samples) ** 0.5
    assert out.num_accepted.double().mean().item() - beta_sps > 10 * 3.3 * sigma


TARGET_RULES = [
    (rule, rule_id)
    for rule, rule_id in zip(RULES, RULE_IDS, strict=True)
    if rule[0] in ("sps", "cactus", "cactus_exact", "interp")
]


@pytest.mark.parametrize(
    ("name", "params"), [rule for rule, _ in TARGET_RULES], ids=[i for _, i in TARGET_RULES]
)
def test_target_rule_beta_is_sum_of_p_times_min_one_h_over_p(name, params):
    """beta = sum_x p(x) min(1, h_x(x) / p(x)), h_x built by the rule's own target_row."""
    rule = make_sampler(name, **params)
    assert isinstance(rule, TargetRule)
    p, q = _pairs(20, 6, seed=3)
    beta = rule.acceptance_probability(p, q)
    for row in range(p.shape[0]):
        total = 0.0
        for x in range(6):
            if p[row, x] == 0:
                continue
            n = torch.tensor([x])
            h = rule.target_row(p[row : row + 1], q[row : row + 1], n, q[row, n], p[row, n])[0]
            total += p[row, x].item() * min(1.0, h[x].item() / p[row, x].item())
        assert beta[row].item() == pytest.approx(total, abs=1e-12)


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_exact_statistics_are_batched_over_any_leading_axes(name, params):
    rule = make_sampler(name, **params)
    p, q = _pairs(12, 7, seed=4)
    law = rule.emitted_law(p.view(3, 4, 7), q.view(3, 4, 7))
    beta = rule.acceptance_probability(p.view(3, 4, 7), q.view(3, 4, 7))
    assert law.shape == (3, 4, 7) and beta.shape == (3, 4)
    torch.testing.assert_close(law.view(12, 7), rule.emitted_law(p, q), atol=0, rtol=0)
    torch.testing.assert_close(law.sum(-1), torch.ones(3, 4, dtype=torch.float64))
    assert bool(((beta >= 0) & (beta <= 1 + 1e-12)).all())


def test_sps_statistics_are_one_minus_tv_and_q():
    p, q = _pairs(30, 9, seed=5)
    rule = make_sampler("sps")
    torch.testing.assert_close(rule.acceptance_probability(p, q), torch.minimum(p, q).sum(-1))
    torch.testing.assert_close(rule.emitted_law(p, q), q, atol=1e-15, rtol=0)


def test_unnormalised_float32_rows_are_normalised():
    p, q = _pairs(8, 5, seed=6)
    rule = make_sampler("cactus", delta=0.5)
    torch.testing.assert_close(
        rule.emitted_law((3 * p).float(), (0.5 * q).float()),
        rule.emitted_law(p.float().double(), q.float().double()),
    )
    with pytest.raises(ValueError, match="no positive mass"):
        rule.acceptance_probability(torch.zeros(5), q[0])
    with pytest.raises(ValueError, match="vocabulary axis"):
        rule.emitted_law(p[:, :4], q)


@pytest.mark.parametrize("divergence", [*DIVERGENCES, "taylor"])
def test_a_grid_of_budgets_in_one_call_equals_one_rule_per_budget(divergence):
    """gamma for [D, N, V] at once: the frontier's vectorised path gives each rule's own law."""
    p, q = _pairs(25, 8, seed=8)
    deltas = torch.tensor([0.0, 0.01, 0.2, 1.0, 8.0], dtype=torch.float64)
    grid = deltas[:, None, None]
    gamma = taylor_gamma(q, grid) if divergence == "taylor" else exact_gamma(q, grid, divergence)
    laws, betas = boosted_law(p, q, gamma), boosted_acceptance(p, gamma)
    tol = 1e-11  # kl / reverse_kl: each root is certified within the solver's 1e-12 bracket
    for i, delta in enumerate(deltas.tolist()):
        if divergence == "taylor":
            rule = make_sampler("cactus", delta=delta)
        else:
            rule = make_sampler("cactus_exact", delta=delta, divergence=divergence)
        torch.testing.assert_close(laws[i], rule.emitted_law(p, q), atol=tol, rtol=0)
        torch.testing.assert_close(betas[i], rule.acceptance_probability(p, q), atol=tol, rtol=0)


def test_exact_gamma_grid_rejects_negative_budgets():
    with pytest.raises(ValueError, match="delta"):
        exact_gamma(torch.rand(4), torch.tensor([0.5, -0.1])[:, None])


def test_normalised_checks_inputs():
    with pytest.raises(ValueError, match="non-negative"):
        normalised(torch.tensor([0.5, -0.1, 0.6]), torch.ones(3))
    with pytest.raises(ValueError, match="finite"):
        normalised(torch.ones(3), torch.tensor([0.5, float("nan"), 0.5]))


class _Lowering(TargetRule):
    """A target that LOWERS the drafted token (h(n) = q(n) / 2): no rule here does, but then the
    x = n terms of the recovery sums are non-zero, which the closed form must subtract."""

    name = "lowering"

    def boosted(self, q_n, p_n):
        return q_n / 2


def test_law_of_a_target_below_q_matches_output_distribution():
    rule = _Lowering()
    p, q = _pairs(40, 6, seed=9)
    law = rule.emitted_law(p, q)
    for row in range(p.shape[0]):
        torch.testing.assert_close(
            law[row], rule.output_distribution(p[row], q[row]), atol=1e-12, rtol=0
        )


def test_kl_root_at_q_zero_is_zero_and_roots_stay_tight():
    """KL(gamma; 0) is infinite for gamma > 0: the root is exactly 0 (pinned, no bisection).
    Every root stays within 1e-12 of an independent 200-step bisection and inside the budget,
    including roots where rounding leaves g = +1e-16 on the bracket's edge."""
    q = torch.cat([torch.zeros(3), torch.linspace(1e-6, 1 - 1e-6, 400)]).double()
    for divergence in ("kl", "reverse_kl"):
        for delta in (1e-4, 0.3, 1.0, 5.0):
            gamma = exact_gamma(q, delta, divergence)
            if divergence == "kl":
                assert torch.all(gamma[:3] == 0)
            lo, hi = q.clone(), torch.ones_like(q)
            for _ in range(200):
                mid = (lo + hi) / 2
                ok = binary_divergence(mid, q, divergence) <= delta
                lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
            assert (gamma - lo).abs().max().item() < 2e-12
            assert torch.all(binary_divergence(gamma, q, divergence) <= delta)


@pytest.mark.parametrize("name", ["topk", "tas", "greedy"])
def test_threshold_laws_stay_non_negative_when_every_draft_is_accepted(name):
    """Found on SmolLM2 contexts: every draft inside q's top-k, so beta = 1 up to rounding, made
    1 - beta = -7e-17 and a negative law entry (KL NaN). Some of these 400 rows reproduce it."""
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(400, 4, generator=gen, dtype=torch.float64)
    p = torch.nn.functional.pad(p / p.sum(-1, keepdim=True), (0, 2))
    # q's top 5 include a token p never drafts: the recovery puts its weight there.
    q = torch.nn.functional.pad(torch.full((400, 5), 0.2, dtype=torch.float64), (0, 1))
    rule = make_sampler(name, **({"k": 5} if name == "topk" else {}))
    law = rule.emitted_law(p, q)
    assert torch.all(law >= 0)
    assert torch.isfinite(full_divergence(law, q, "kl")).all()
