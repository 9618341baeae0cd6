"""The chain every rule's verify runs (samplers/chain.py), against a loop over rows written from
its definition: the accepted prefix from u_j < a_j, the token after it by the inverse CDF of
its weights, the draws in the order the golden rows were decoded with."""

import pytest
import torch

from cactus_bench.samplers.chain import Decisions, LastToken, verify_chain

BATCH, M, VOCAB = 48, 4, 12


def _pieces(seed):
    """a [B, m] with exact 0s, 1/2s and 1s; bonus rows [B, m + 1, V] and recovery rows [B, m, V] of
    non-negative weights (not normalised, with zeros); drafted ids [B, m]."""
    gen = torch.Generator().manual_seed(seed)
    accept = torch.rand((BATCH, M), generator=gen, dtype=torch.float64)
    accept = torch.where(accept < 0.08, 0.0, torch.where(accept > 0.4, 1.0, accept))
    accept[::6, 0] = 0.5  # on the threshold: accepted
    bonus = torch.rand((BATCH, M + 1, VOCAB), generator=gen, dtype=torch.float64) * 3
    recovery = torch.rand((BATCH, M, VOCAB), generator=gen, dtype=torch.float64)
    recovery = torch.where(recovery < 0.4, 0.0, recovery)
    recovery[:, :, 0] = 0.5  # no recovery row without mass
    ids = torch.randint(0, VOCAB, (BATCH, M), generator=gen)
    return ids, accept, bonus, recovery


def _inverse_cdf(weights, u) -> int:
    cdf = weights.cumsum(0)
    target = u * float(cdf[-1])
    return next(i for i in range(len(cdf)) if float(cdf[i]) > target)


def _by_loop(ids, accept, bonus, recovery, uniforms, threshold, bonus_argmax, window=None):
    decided = accept >= 0.5 if threshold else uniforms[:, :M] < accept
    if window is not None:
        decided = window(decided)
    rows, counts = [], []
    for b in range(BATCH):
        k = next((j for j in range(M) if not decided[b, j]), M)
        if k < M:
            token = (
                int(bonus[b, k].argmax())
                if recovery is None
                else _inverse_cdf(recovery[b, k], float(uniforms[b, M]))
            )
        elif bonus_argmax:
            token = int(bonus[b, M].argmax())
        else:
            token = _inverse_cdf(bonus[b, M], float(uniforms[b, M]))
        rows.append(ids[b, :k].tolist() + [token] + [-1] * (M - k))
        counts.append(k)
    return torch.tensor(rows), torch.tensor(counts)


def _decisions(accept, bonus, recovery, threshold, bonus_argmax, window=None):
    def last_token(at):
        rec = None if recovery is None else recovery[at.rows, at.position]
        return LastToken(bonus[at.rows, at.num_accepted], rec, bonus_argmax)

    return Decisions(accept, last_token, by_threshold=threshold, across_window=window)


KINDS = [  # (by_threshold, recovery drawn, bonus_is_argmax): SpS-like, TAS, greedy, a mix
    (False, True, False),
    (True, False, False),
    (True, False, True),
    (False, True, True),
]


@pytest.mark.parametrize(("threshold", "drawn", "bonus_argmax"), KINDS)
def test_the_chain_is_the_loop_over_rows(threshold, drawn, bonus_argmax):
    ids, accept, bonus, recovery = _pieces(seed=3)
    recovery = recovery if drawn else None
    uniforms = torch.rand((BATCH, M + 1), generator=torch.Generator().manual_seed(5), dtype=float)
    decisions = _decisions(accept, bonus, recovery, threshold, bonus_argmax)
    out = verify_chain(ids, decisions, uniforms=uniforms)
    tokens, counts = _by_loop(ids, accept, bonus, recovery, uniforms, threshold, bonus_argmax)
    assert torch.equal(out.token_ids, tokens)
    assert torch.equal(out.num_accepted, counts)
    assert 0 < int((counts == M).sum()) < BATCH  # some rows take the bonus, some recover


def test_a_window_rewrites_the_decisions_before_the_prefix_is_counted():
    ids, accept, bonus, recovery = _pieces(seed=4)
    uniforms = torch.rand((BATCH, M + 1), generator=torch.Generator().manual_seed(6), dtype=float)

    def accept_after_two_accepts(decided):  # a rejection followed by two accepts is overridden
        later = torch.zeros_like(decided)
        later[:, :-2] = decided[:, 1:-1] & decided[:, 2:]
        return decided | later

    decisions = _decisions(accept, bonus, recovery, False, False, accept_after_two_accepts)
    out = verify_chain(ids, decisions, uniforms=uniforms)
    plain = verify_chain(ids, _decisions(accept, bonus, recovery, False, False), uniforms=uniforms)
    assert not torch.equal(out.num_accepted, plain.num_accepted)  # the window changed something
    window = accept_after_two_accepts
    tokens, counts = _by_loop(ids, accept, bonus, recovery, uniforms, False, False, window)
    assert torch.equal(out.token_ids, tokens)
    assert torch.equal(out.num_accepted, counts)


@pytest.mark.parametrize(("threshold", "drawn", "bonus_argmax"), KINDS)
def test_a_generator_draws_the_acceptance_then_one_uniform_per_row(threshold, drawn, bonus_argmax):
    """torch.rand [B, m] in float32 (none by threshold), then [B, 1] float64 for the last token
    (none when both the recovery and the bonus are argmaxes): the order the goldens hold."""
    ids, accept, bonus, recovery = _pieces(seed=7)
    recovery = recovery if drawn else None
    decisions = _decisions(accept, bonus, recovery, threshold, bonus_argmax)
    generator = torch.Generator().manual_seed(11)
    out = verify_chain(ids, decisions, generator)
    replay = torch.Generator().manual_seed(11)
    uniforms = torch.zeros((BATCH, M + 1), dtype=torch.float64)
    if not threshold:
        uniforms[:, :M] = torch.rand((BATCH, M), generator=replay, dtype=torch.float32)
    if drawn or not bonus_argmax:
        uniforms[:, M] = torch.rand((BATCH, 1), generator=replay, dtype=torch.float64)[:, 0]
    assert torch.equal(out.token_ids, verify_chain(ids, decisions, uniforms=uniforms).token_ids)
    assert torch.equal(torch.rand(4, generator=generator), torch.rand(4, generator=replay))
