"""FLy (rules/fly.py) against the law of a whole verification step, enumerated by brute force.

The reference restates vLLM's `apply_fly_random_acceptance_kernel` (vllm/v1/spec_decode/fly.py)
in plain Python: native decision u_j <= q_j(n)/p_j(n); a native rejection at j is deferred when
q_j(n) > 0, j + W < m, the top-3 entropy of q_j is >= theta and the next W drafts are natively
accepted; the first rejection left recovers from norm((q - p)+), all accepted draws the bonus
from q_m. Enumerating every draft sequence (V^m) and every pattern of native decisions (2^m)
gives the exact law of the emitted row (accepted drafts, then one token); `verify` must sample
it (Monte Carlo, Pearson chi-square at the fixed level of test_engine_laws).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict

import pytest
import torch
from test_engine_laws import P_VALUE_FLOOR, chi_square_p_value

from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")


def top3_entropy(q: list[float]) -> float:
    return -sum(x * math.log(x) for x in sorted(q, reverse=True)[:3] if x > 0)


def step_law(draft: list[list[float]], target: list[list[float]], theta: float, window: int):
    """{emitted row (tuple): probability} of one FLy step; draft [m][V], target [m + 1][V]."""
    m, vocab = len(draft), len(draft[0])
    law: dict[tuple, float] = defaultdict(float)
    for drafts in itertools.product(range(vocab), repeat=m):
        weight = math.prod(draft[j][n] for j, n in enumerate(drafts))
        if weight == 0:
            continue
        native_accept = [min(1.0, target[j][n] / draft[j][n]) for j, n in enumerate(drafts)]
        for native in itertools.product((True, False), repeat=m):
            chance = weight * math.prod(
                a if ok else 1 - a for a, ok in zip(native_accept, native, strict=True)
            )
            if chance == 0:
                continue
            accepted = list(native)
            for j, n in enumerate(drafts):
                accepted[j] = native[j] or (
                    target[j][n] > 0
                    and j + window < m
                    and top3_entropy(target[j]) >= theta
                    and all(native[j + 1 : j + window + 1])
                )
            k = next((j for j, ok in enumerate(accepted) if not ok), m)
            if k < m:
                last = [max(q - p, 0.0) for p, q in zip(draft[k], target[k], strict=True)]
            else:
                last = list(target[m])
            total = sum(last)
            for token, mass in enumerate(last):
                if mass > 0:
                    law[(*drafts[:k], token)] += chance * mass / total
    return dict(law)


def laws(seed: int, m: int, vocab: int):
    """[m, V] drafter and [m + 1, V] verifier laws, one per position, with a zero or two."""
    gen = torch.Generator().manual_seed(seed)
    draft = (torch.randn(m, vocab, generator=gen, dtype=torch.float64) * 1.5).softmax(-1)
    target = (torch.randn(m + 1, vocab, generator=gen, dtype=torch.float64) * 1.5).softmax(-1)
    target[0, 0] = 0.0  # a draft the verifier rules out: never deferred
    return draft, target / target.sum(-1, keepdim=True)


def sample_rows(rule, draft, target, samples: int, seed: int) -> Counter:
    gen = torch.Generator().manual_seed(seed)
    m, vocab = draft.shape
    ids = torch.stack(
        [torch.multinomial(draft[j], samples, replacement=True, generator=gen) for j in range(m)],
        dim=1,
    )  # [S, m]
    out = rule.verify(
        ids, draft.expand(samples, m, vocab), target.expand(samples, m + 1, vocab), gen
    )
    rows = out.token_ids.tolist()
    return Counter(
        tuple(row[: k + 1]) for row, k in zip(rows, out.num_accepted.tolist(), strict=True)
    )


# theta, W, m, seed of laws on which FLy's step law is at least 0.05 in TV from SpS's
CASES = [(0.3, 1, 3, 2), (0.3, 2, 3, 5), (0.0, 0, 2, 1), (0.6, 1, 4, 3)]


@pytest.mark.parametrize(("theta", "window", "m", "seed"), CASES)
def test_verify_samples_the_enumerated_law(theta, window, m, seed):
    draft, target = laws(seed, m=m, vocab=3)
    law = step_law(draft.tolist(), target.tolist(), theta, window)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    sps = step_law(draft.tolist(), target.tolist(), math.inf, window)  # the gate never opens
    rows = set(law) | set(sps)
    assert 0.5 * sum(abs(law.get(r, 0.0) - sps.get(r, 0.0)) for r in rows) > 0.05
    rule = make_sampler("fly", entropy_threshold=theta, window=window)
    samples = 60_000
    counts = sample_rows(rule, draft, target, samples, seed=3)
    assert chi_square_p_value(counts, law, samples) > P_VALUE_FLOOR
    assert chi_square_p_value(counts, sps, samples) < P_VALUE_FLOOR  # the test has power


def test_the_enumeration_separates_the_gate_and_the_window():
    """The reference is sensitive to each condition: a wider window defers less, a higher
    entropy threshold defers less, and the accepted length rises over SpS's."""
    draft, target = laws(seed=5, m=3, vocab=3)
    d, t = draft.tolist(), target.tolist()

    def mean_accepted(theta, window):
        return sum((len(row) - 1) * p for row, p in step_law(d, t, theta, window).items())

    sps = mean_accepted(math.inf, 1)
    assert mean_accepted(0.0, 1) > mean_accepted(0.0, 2) > sps + 1e-3
    # with W = 1 positions 0 and 1 can defer: a gate between their entropies keeps one of them
    low, high = sorted(top3_entropy(row) for row in t[:2])
    assert mean_accepted(0.0, 1) > mean_accepted((low + high) / 2, 1) > sps + 1e-3


def test_a_closed_gate_is_sps_token_for_token():
    """Above every entropy FLy is the native sampler: SpS's tokens for one generator."""
    draft, target = laws(seed=2, m=4, vocab=6)
    samples = 2_000
    gen = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.multinomial(draft[j], samples, True, generator=gen) for j in range(4)])
    args = (ids.T.contiguous(), draft.expand(samples, 4, 6), target.expand(samples, 5, 6))
    fly = make_sampler("fly", entropy_threshold=10.0, window=1)
    out = fly.verify(*args, torch.Generator().manual_seed(1))
    sps = make_sampler("sps").verify(*args, torch.Generator().manual_seed(1))
    assert torch.equal(out.token_ids, sps.token_ids)
    opened = make_sampler("fly", entropy_threshold=0.0, window=1)
    wider = opened.verify(*args, torch.Generator().manual_seed(1)).num_accepted
    assert (wider >= out.num_accepted).all() and (wider > out.num_accepted).any()


def test_fly_has_no_law_per_position():
    draft, target = laws(seed=1, m=1, vocab=4)
    rule = make_sampler("fly")
    with pytest.raises(NotImplementedError, match="window"):
        rule.emitted_law(draft[0], target[0])
    with pytest.raises(NotImplementedError, match="window"):
        rule.acceptance_probability(draft[0], target[0])


def test_the_hf_engine_runs_fly_over_its_whole_draft(tiny_pair):
    """The engine hands `verify` the m drafts of a step at once, which is all FLy's window needs:
    with its gate closed it emits SpS's tokens for each seed; opened, it accepts more."""
    from cactus_bench.engine import SamplingParams, SpeculativeDecoder

    drafter, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=1.0, top_k=8)

    def run(rule, seed):
        decoder = SpeculativeDecoder(
            drafter, verifier, tok, rule, num_draft_tokens=4, sampling=sampling
        )
        return decoder.generate([41, 7], max_new_tokens=24, seed=seed)

    def per_step(record) -> float:  # accepted drafts per verification step
        return sum(record.accepted_per_step) / len(record.accepted_per_step)

    closed = make_sampler("fly", entropy_threshold=10.0, window=1)
    opened = make_sampler("fly", entropy_threshold=0.0, window=1)
    shut_al = open_al = 0.0
    for seed in range(4):
        shut = run(closed, seed)
        assert shut.output_ids == run(make_sampler("sps"), seed).output_ids
        shut_al += per_step(shut)
        open_al += per_step(run(opened, seed))
    assert open_al > shut_al


def test_the_vllm_bridge_hands_fly_the_whole_draft():
    """`verify_ragged` (vLLM's rejection sampler, generic path) passes one request's drafts to
    `verify` together: FLy there gives the tokens it gives alone, for each generator."""
    from cactus_bench.vllm.bridge import verify_ragged

    draft, target = laws(seed=4, m=4, vocab=8)
    draft, target = draft.float(), target.float()
    ids = torch.stack([torch.multinomial(draft[j], 1, generator=torch.Generator().manual_seed(j))
                       for j in range(4)]).view(4)  # fmt: skip
    rule = make_sampler("fly", entropy_threshold=0.0, window=1)
    lengths = set()
    for seed in range(30):
        row, k = verify_ragged(
            rule, [ids], [draft], [target[:4]], [target[4]], [False],
            [torch.Generator().manual_seed(seed)], 4,
        )  # fmt: skip
        alone = rule.verify(
            ids.view(1, 4), draft[None], target[None], torch.Generator().manual_seed(seed)
        )
        k = int(k[0])
        assert k == int(alone.num_accepted[0])
        assert torch.equal(row[0, : k + 1], alone.token_ids[0, : k + 1])
        lengths.add(k)
    assert len(lengths) > 1  # the seeds reach different accepted lengths
