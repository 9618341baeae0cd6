"""Every catalogue rule's verify, with the engine's draws and no checks: no host read, one graph.

The engine passes its own per-row uniforms (`uniforms` [B, m + 1]) and check=False; verify must
then read nothing back to the host (each read is a GPU sync that also forbids CUDA-graph capture)
and trace into one aten graph (`bench.op_count.compiles_fullgraph`). With the uniforms a
generator would have drawn it must return what verify(generator=g) returns: the law unchanged.
The rules are parametrised from the catalogue, so a new rule is covered without editing this.
"""

import pytest
import torch

from cactus_bench.bench.op_count import compiles_fullgraph, count_ops
from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.catalogue import RULE_NAMES

VOCAB, TOP_K = 64, 8  # top-k truncation leaves zeros in both laws; the support is <= 2 k wide
SHAPES = [(1, 2), (8, 4)]
# Parameters other than the defaults where the default would skip code: FLy's default window
# (6) does not fit in m <= 4 drafts, cactus_exact's second numeric root is reverse_kl's, and
# the rules reading the temperature-1 laws plan on the support when they read p, q instead.
CASES = [(name, {}) for name in RULE_NAMES] + [
    ("fly", {"window": 1}),
    ("cactus_exact", {"divergence": "reverse_kl"}),
    ("opt", {"test_law": "processed"}),
    ("tokenv1", {"test_law": "processed"}),
    ("bild", {"test_law": "processed"}),
]
CASE_IDS = [name + "".join(f"-{k}={v}" for k, v in params.items()) for name, params in CASES]


def _truncated(logits: torch.Tensor) -> torch.Tensor:
    """[..., V] -> fp32 laws with zeros outside the top k, as the engine's processing leaves."""
    kth = logits.topk(TOP_K, -1).values[..., -1:]
    return torch.where(logits >= kth, logits, torch.full_like(logits, -torch.inf)).softmax(-1)


def _inputs(batch: int, m: int, seed: int = 0):
    """(ids [B, m], p [B, m, V], q [B, m + 1, V], unscaled laws) with drafts drawn from p."""
    g = torch.Generator().manual_seed(seed)
    draft_logits = torch.randn(batch, m, VOCAB, generator=g) * 2
    target_logits = draft_logits.repeat(1, 2, 1)[:, : m + 1] + torch.randn(
        batch, m + 1, VOCAB, generator=g
    )
    p, q = _truncated(draft_logits), _truncated(target_logits)
    ids = torch.multinomial(p.reshape(-1, VOCAB), 1, generator=g).reshape(batch, m)
    unscaled = {
        "unscaled_draft_probs": draft_logits.softmax(-1),
        "unscaled_target_probs": target_logits.softmax(-1),
    }
    return ids, p, q, unscaled


def _rule(name, params):
    rule = make_sampler(name, **params)
    return rule, getattr(rule, "reads_unscaled", False)


def _engine_call(rule, reads_unscaled, ids, p, q, unscaled, uniforms):
    """verify as the capturing engine calls it: its uniforms, no checks, a static support."""
    extra = unscaled if reads_unscaled else {}

    def call(ids, p, q, uniforms):
        out = rule.verify(
            ids, p, q, uniforms=uniforms, check=False, support_width=2 * TOP_K, **extra
        )
        return out.token_ids, out.num_accepted

    return call


@pytest.mark.parametrize("batch,m", SHAPES + [(8, 2), (1, 4)])
@pytest.mark.parametrize("name,params", CASES, ids=CASE_IDS)
def test_verify_reads_nothing_from_the_host(name, params, batch, m):
    rule, reads_unscaled = _rule(name, params)
    ids, p, q, unscaled = _inputs(batch, m)
    uniforms = torch.rand(batch, m + 1, dtype=torch.float64, generator=torch.Generator())
    call = _engine_call(rule, reads_unscaled, ids, p, q, unscaled, uniforms)
    counter, (token_ids, num_accepted) = count_ops(call, ids, p, q, uniforms)
    assert counter.host_reads == 0, dict(counter.reads_by_op)
    assert counter.ops > 0  # the counter saw the call at all
    assert ((num_accepted >= 0) & (num_accepted <= m)).all()
    assert (token_ids.gather(1, num_accepted.unsqueeze(1)) >= 0).all()
    # the checked call reads the host: the counter can fail this test
    extra = unscaled if reads_unscaled else {}
    checked, _ = count_ops(rule.verify, ids, p, q, torch.Generator(), **extra)
    assert checked.host_reads > 0


@pytest.mark.parametrize("batch,m", SHAPES)
@pytest.mark.parametrize("name,params", CASES, ids=CASE_IDS)
def test_verify_compiles_into_one_graph(name, params, batch, m):
    rule, reads_unscaled = _rule(name, params)
    ids, p, q, unscaled = _inputs(batch, m)
    uniforms = torch.rand(batch, m + 1, dtype=torch.float64, generator=torch.Generator())
    call = _engine_call(rule, reads_unscaled, ids, p, q, unscaled, uniforms)
    ok, reason = compiles_fullgraph(call, ids, p, q, uniforms)
    assert ok, reason


def _recorded_draws(rule, ids, p, q, unscaled, seed, monkeypatch):
    """(VerifyOutput, the torch.rand outputs verify drew) for verify(generator=seed)."""
    draws = []
    rand = torch.rand

    def recording(*args, **kwargs):
        out = rand(*args, **kwargs)
        draws.append(out.clone())
        return out

    monkeypatch.setattr(torch, "rand", recording)
    out = rule.verify(ids, p, q, torch.Generator().manual_seed(seed), **unscaled)
    monkeypatch.setattr(torch, "rand", rand)
    return out, draws


@pytest.mark.parametrize("batch,m", SHAPES)
@pytest.mark.parametrize("name,params", CASES, ids=CASE_IDS)
def test_given_uniforms_reproduce_the_generator(name, params, batch, m, monkeypatch):
    """verify(uniforms=u) == verify(generator=g) when u holds what g drew: the acceptance draws
    [B, m] (absent for the rules that decide without one) and one per row for the last token
    (absent for greedy); the rules' own draw order, read off torch.rand."""
    rule, reads_unscaled = _rule(name, params)
    for seed in range(6):
        ids, p, q, unscaled = _inputs(batch, m, seed)
        extra = unscaled if reads_unscaled else {}
        expected, draws = _recorded_draws(rule, ids, p, q, extra, seed, monkeypatch)
        uniforms = torch.rand(batch, m + 1, dtype=torch.float64, generator=torch.Generator())
        for draw in draws:
            if tuple(draw.shape) == (batch, m):
                uniforms[:, :m] = draw.double()
            else:
                assert tuple(draw.shape) == (batch, 1), "an unexpected draw"
                uniforms[:, m] = draw[:, 0].double()
        assert len(draws) <= 2
        call = _engine_call(rule, reads_unscaled, ids, p, q, unscaled, uniforms)
        token_ids, num_accepted = call(ids, p, q, uniforms)
        assert torch.equal(token_ids, expected.token_ids), (seed, token_ids, expected.token_ids)
        assert torch.equal(num_accepted, expected.num_accepted)


def test_support_width_smaller_than_the_support_is_refused():
    rule = make_sampler("mentored")
    ids, p, q, _ = _inputs(2, 2)
    with pytest.raises(ValueError, match="support_width"):
        rule.verify(ids, p, q, support_width=TOP_K - 1)


def test_uniforms_of_the_wrong_shape_are_refused():
    ids, p, q, _ = _inputs(2, 2)
    with pytest.raises(ValueError, match="uniforms must be"):
        make_sampler("sps").verify(ids, p, q, uniforms=torch.rand(2, 2, dtype=torch.float64))


def _plans_on_support(name, params) -> bool:
    """The rules of samplers/rules/ whose verify restricts the plan to the support."""
    rule, reads_unscaled = _rule(name, params)
    full_rows = getattr(getattr(rule, "builder", None), "full_rows", False)
    return hasattr(rule, "plan") and not reads_unscaled and not full_rows


SUPPORT_CASES = [case for case in CASES if _plans_on_support(*case)]
SUPPORT_IDS = [i for c, i in zip(CASES, CASE_IDS, strict=True) if c in SUPPORT_CASES]


@pytest.mark.parametrize("name,params", SUPPORT_CASES, ids=SUPPORT_IDS)
def test_the_static_support_gives_the_full_rows_plan(name, params):
    """On each row's support (p > 0 or q > 0) the plan on support_width columns equals the
    plan on the full rows; elsewhere no draft lands and no residual mass goes."""
    rule, _ = _rule(name, params)
    _, p, q, _ = _inputs(8, 4)
    q = q[:, :4]
    accept, residual = rule._plan_on_support(p, q, 2 * TOP_K, False)
    full_accept, full_residual = rule.plan(p, q)
    support = (p > 0) | (q > 0)
    assert int(support.sum(-1).max()) <= 2 * TOP_K < VOCAB  # the compaction restricted the rows
    torch.testing.assert_close(accept[support], full_accept[support], rtol=0, atol=1e-12)
    expected = torch.where(support, full_residual, 0.0)
    torch.testing.assert_close(residual, expected, rtol=0, atol=1e-12)
