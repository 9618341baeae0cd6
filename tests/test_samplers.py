"""Acceptance rules: exact laws, Monte Carlo agreement, chain semantics, edge cases, errors."""

import pytest
import torch
from helpers.laws import CHI2_999, P_SMALL, Q_SMALL, RULE_IDS, RULES, chi_square

from cactus_bench.samplers import SAMPLER_NAMES, full_divergence, make_sampler
from cactus_bench.samplers.naive import naive_verify


def _random_pair(batch, m, vocab, seed, sharp=2.0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(batch, m, vocab, generator=gen) * sharp, -1)
    q = torch.softmax(torch.randn(batch, m + 1, vocab, generator=gen) * sharp, -1)
    ids = torch.multinomial(p.reshape(-1, vocab), 1, generator=gen).reshape(batch, m)
    return ids, p.to(dtype), q.to(dtype)


def _empirical_first_token(rule, p, q, samples, seed):
    gen = torch.Generator().manual_seed(seed)
    vocab = p.shape[0]
    ids = torch.multinomial(p.float().expand(samples, vocab), 1, replacement=True, generator=gen)
    out = rule.verify(
        ids, p.float().expand(samples, 1, vocab), q.float().expand(samples, 2, vocab), generator=gen
    )
    return torch.bincount(out.token_ids[:, 0], minlength=vocab).double()


def test_sps_output_distribution_is_the_verifier():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        p = torch.softmax(torch.randn(50, generator=gen) * 3, -1)
        q = torch.softmax(torch.randn(50, generator=gen) * 3, -1)
        q[torch.randperm(50, generator=gen)[:20]] = 0  # truncated verifier row
        q = q / q.sum()
        law = make_sampler("sps").output_distribution(p, q)
        torch.testing.assert_close(law, q.double(), atol=1e-7, rtol=0)
    law = make_sampler("sps").output_distribution(P_SMALL, Q_SMALL)
    assert torch.allclose(law, Q_SMALL, atol=1e-9, rtol=0)


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_output_distribution_is_a_distribution(name, params):
    law = make_sampler(name, **params).output_distribution(P_SMALL, Q_SMALL)
    assert law.dtype == torch.float64
    assert torch.all(law >= 0)
    assert law.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_cactus_exact_law_by_hand():
    """Independent computation of sum_n p(n)[a_n 1{x=n} + (1-a_n) norm(max(0, h_n - p))]."""
    delta = 0.5
    rule = make_sampler("cactus_exact", delta=delta, divergence="kl")
    from cactus_bench.samplers import exact_gamma

    expected = torch.zeros(6, dtype=torch.float64)
    for n in range(6):
        if P_SMALL[n] == 0:
            continue
        gamma = exact_gamma(Q_SMALL[n : n + 1], delta, "kl").item()
        h = Q_SMALL * (1 - gamma) / (1 - Q_SMALL[n].item())
        h[n] = gamma
        assert full_divergence(h, Q_SMALL, "kl").item() <= delta + 1e-6
        accept = min(1.0, gamma / P_SMALL[n].item())
        residual = (h - P_SMALL).clamp(min=0)
        expected += P_SMALL[n] * (1 - accept) * residual / residual.sum()
        expected[n] += P_SMALL[n] * accept
    torch.testing.assert_close(
        rule.output_distribution(P_SMALL, Q_SMALL), expected, atol=1e-6, rtol=0
    )


def test_every_registered_rule_is_in_the_law_tests():
    """A rule added to SAMPLERS must join RULES, or it would skip every law test below. A rule
    whose decision reads the positions after it has no law per position: test_samplers_fly.py
    enumerates its law over a whole step instead."""
    from cactus_bench.samplers import SAMPLERS

    window_rules = {name for name in SAMPLERS if getattr(make_sampler(name), "reads_window", 0)}
    assert window_rules == {"fly"}
    assert set(SAMPLERS) - window_rules == {name for name, _ in RULES}


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_monte_carlo_matches_output_distribution(name, params):
    rule = make_sampler(name, **params)
    counts = _empirical_first_token(rule, P_SMALL, Q_SMALL, samples=200_000, seed=11)
    law = rule.output_distribution(P_SMALL, Q_SMALL)
    stat, dof = chi_square(counts, law)
    if dof == 0:
        return  # a point mass: the support check above is the whole test
    assert stat < CHI2_999[dof], f"chi2={stat:.1f} with {dof} dof"


def test_monte_carlo_test_is_sensitive():
    """The same check rejects Cactus's law when compared against q: it is not vacuous."""
    rule = make_sampler("cactus", delta=0.75)
    counts = _empirical_first_token(rule, P_SMALL, Q_SMALL, samples=200_000, seed=11)
    stat, dof = chi_square(counts[Q_SMALL > 0], Q_SMALL[Q_SMALL > 0] / Q_SMALL.sum())
    assert stat > 10 * CHI2_999[dof]


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_fast_path_equals_naive_path(name, params):
    rule = make_sampler(name, **params)
    ids, p, q = _random_pair(48, 6, 40, seed=5)
    fast = rule.verify(ids, p, q, generator=torch.Generator().manual_seed(9))
    slow = naive_verify(rule, ids, p, q, generator=torch.Generator().manual_seed(9))
    assert torch.equal(fast.token_ids, slow.token_ids)
    assert torch.equal(fast.num_accepted, slow.num_accepted)


@pytest.mark.parametrize("divergence", ["kl", None])
def test_delta_zero_reproduces_sps_exactly(divergence):
    ids, p, q = _random_pair(64, 8, 100, seed=2)
    name = "cactus_exact" if divergence else "cactus"
    lossless = make_sampler(name, delta=0.0, divergence=divergence)
    a = lossless.verify(ids, p, q, generator=torch.Generator().manual_seed(4))
    b = make_sampler("sps").verify(ids, p, q, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.token_ids, b.token_ids)
    assert torch.equal(a.num_accepted, b.num_accepted)


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
def test_chain_semantics(name, params):
    batch, m, vocab = 64, 7, 30
    ids, p, q = _random_pair(batch, m, vocab, seed=8, sharp=1.0)
    out = make_sampler(name, **params).verify(ids, p, q, generator=torch.Generator().manual_seed(0))
    assert out.token_ids.shape == (batch, m + 1) and out.token_ids.dtype == torch.long
    assert out.num_accepted.shape == (batch,) and out.num_accepted.dtype == torch.long
    for b in range(batch):
        k = int(out.num_accepted[b])
        assert 0 <= k <= m
        assert torch.equal(out.token_ids[b, :k], ids[b, :k])  # accepted drafts, unchanged
        assert 0 <= int(out.token_ids[b, k]) < vocab  # exactly one recovered or bonus token
        assert torch.all(out.token_ids[b, k + 1 :] == -1)


def test_forced_accepts_and_rejects_and_row_independence():
    """Row 0 must accept all m drafts and take a bonus from row m; row 1 must reject at 2."""
    m, vocab = 4, 5
    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
    q = torch.full((2, m + 1, vocab), 0.25)
    q[:, :, 0] = 0.0  # token 0 impossible for the verifier
    p = q[:, :m].clone()  # p = q: every draft is accepted with probability 1 ...
    q[1, 2, 3] = 0.0  # ... except row 1, position 2, where the drafted token 3 has q = 0
    q[1, 2] /= q[1, 2].sum()
    q[0, m] = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0])  # row 0's bonus is certain: token 3
    for name in ("sps", "cactus", "cactus_exact"):
        out = make_sampler(name).verify(ids, p, q, generator=torch.Generator().manual_seed(1))
        assert out.num_accepted.tolist() == [4, 2]
        assert out.token_ids[0].tolist() == [1, 2, 3, 4, 3]
        assert out.token_ids[1, :2].tolist() == [1, 2]
        assert int(out.token_ids[1, 2]) in (1, 2, 4)  # recovered from max(0, q - p) at pos 2
        assert out.token_ids[1, 3:].tolist() == [-1, -1]
        single = make_sampler(name).verify(ids[1:], p[1:], q[1:])
        assert single.num_accepted.tolist() == [2]


@pytest.mark.parametrize(("name", "params"), RULES, ids=RULE_IDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_edge_cases_give_finite_valid_tokens(name, params, dtype):
    batch, m, vocab = 16, 5, 64
    ids, p, q = _random_pair(batch, m, vocab, seed=21, sharp=4.0)
    q[0, :, :] = 0.0
    q[0, :, 7] = 1.0  # q(n) = 1 somewhere, 0 elsewhere
    ids[0, 0] = 7
    q[1, :, ids[1, 0]] = 0.0  # q(n) = 0
    p[2, 0, ids[2, 0]] = 0.0  # p(n) = 0 (a drafter restricted to a subset)
    top = q[3:].topk(3, dim=-1)
    q[3:] = torch.zeros_like(q[3:]).scatter(-1, top.indices, top.values)  # top-k truncation
    q[4] *= 0.97  # rows that do not sum to 1
    p[5] *= 1.02
    out = make_sampler(name, **params).verify(
        ids, p.to(dtype), q.to(dtype), generator=torch.Generator().manual_seed(3)
    )
    k = out.num_accepted
    last = out.token_ids[torch.arange(batch), k]
    assert torch.all((last >= 0) & (last < vocab))
    if name not in ("fsd", "fsd_unsmoothed", "tokenv1"):  # these may reject whatever q(n) is
        assert int(k[0]) >= 1  # q(n) = 1 is accepted
    if name in ("sps", "cactus", "greedy", "tas", "topk"):
        # These never emit a token the verifier gives zero probability at that position.
        q_at = q[torch.arange(batch), k].gather(1, last[:, None]).squeeze(1)
        assert torch.all(q_at > 0)
    law = make_sampler(name, **params).output_distribution(p[6, 0].to(dtype), q[6, 0].to(dtype))
    assert torch.isfinite(law).all()


def test_verify_is_deterministic_for_a_seed():
    ids, p, q = _random_pair(32, 6, 50, seed=1)
    rule = make_sampler("cactus", delta=1.0)
    a = rule.verify(ids, p, q, generator=torch.Generator().manual_seed(5))
    b = rule.verify(ids, p, q, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.token_ids, b.token_ids)


def test_acceptance_is_monotone_in_delta():
    ids, p, q = _random_pair(256, 10, 80, seed=6)
    means = []
    for delta in (0.0, 0.25, 0.75, 2.0):
        out = make_sampler("cactus", delta=delta).verify(
            ids, p, q, generator=torch.Generator().manual_seed(0)
        )
        means.append(out.num_accepted.float().mean().item())
    assert means == sorted(means) and means[-1] > means[0]


def test_errors_name_the_argument():
    ids, p, q = _random_pair(2, 3, 10, seed=0)
    rule = make_sampler("sps")
    with pytest.raises(ValueError, match="target_probs"):
        rule.verify(ids, p, q[:, :3])
    with pytest.raises(ValueError, match="vocab mismatch"):
        rule.verify(ids, p, torch.cat([q, q[..., :1]], -1))
    with pytest.raises(ValueError, match="draft_probs"):
        rule.verify(ids, p[:, :2], q)
    with pytest.raises(ValueError, match="draft_token_ids"):
        rule.verify(ids[0], p, q)
    with pytest.raises(ValueError, match="draft_token_ids"):
        rule.verify(ids + 10, p, q)
    bad = q.clone()
    bad[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        rule.verify(ids, p, bad)
    with pytest.raises(ValueError, match="delta"):
        make_sampler("cactus", delta=-0.1)
    with pytest.raises(ValueError, match="delta"):
        make_sampler("cactus_exact", delta=float("nan"))
    with pytest.raises(ValueError, match="threshold"):
        make_sampler("tas", threshold=0.0)
    with pytest.raises(ValueError, match="threshold"):
        make_sampler("tas", threshold=1.5)
    with pytest.raises(ValueError, match="k must"):
        make_sampler("topk", k=0)
    with pytest.raises(ValueError, match="alpha"):
        make_sampler("interp", alpha=1.5)
    with pytest.raises(ValueError, match="divergence"):
        make_sampler("cactus_exact", divergence="js")
    with pytest.raises(ValueError, match="unknown sampler"):
        make_sampler("medusa")
    with pytest.raises(ValueError, match="does not take delta"):
        make_sampler("sps", delta=0.5)
    # the paper's rules, the heuristic baselines and the training-free lossy family
    assert set(SAMPLER_NAMES) == {
        "sps",
        "cactus",
        "cactus_exact",
        "tas",
        "interp",
        "topk",
        "greedy",
        "ensemble",
        "mentored",
        "lenience",
        "chow",
        "diff",
        "opt",
        "tokenv1",
        "tokenv2",
        "tokenv3",
        "fsd",
        "fsd_reducible",
        "fsd_unsmoothed",
        "bild",
        "fly",
        "topband",
        "topband_cascade",
        "additive",
        "greedy_margin",
    }


def test_tas_defaults_follow_vllm():
    rule = make_sampler("tas")
    assert rule.params() == {"threshold": 0.09, "alpha": pytest.approx(0.3)}


def test_catalogue_lists_exactly_what_each_rule_takes():
    """The torch-free catalogue (config checks) and the rule classes (runs) agree."""
    import inspect

    from cactus_bench.samplers import RULES, SAMPLERS

    assert tuple(RULES) == tuple(SAMPLERS)
    for name, cls in SAMPLERS.items():
        cls = getattr(cls, "builder", cls)  # samplers/rules/ builders take the parameters
        if RULES[name].alias_of:  # an alias builds the rule it names, with that rule's params
            alias = make_sampler(name)
            assert alias.name == RULES[name].alias_of, name
            continue
        signature = inspect.signature(cls.__init__).parameters.values()
        takes = [
            p.name for p in signature if p.name != "self" and p.kind == p.POSITIONAL_OR_KEYWORD
        ]
        assert takes == [p.name for p in RULES[name].params], name
        assert set(make_sampler(name).params()) == set(takes), name
