"""FLy (rules/fly.py) against the law of a whole verification step, enumerated by brute force,
and its parameters as vLLM defines them.

The reference (`step_law`, tests/helpers/laws.py) restates vLLM 0.34's sampled-draft loop
(`rejection_sampler_utils.py`, lines 591-745: a native rejection held pending while the next W
native decisions are read) in plain Python: native decision u_j < q_j(n)/p_j(n); a native
rejection at j is held when p_j(n) > 0, q_j(n) > 0, j + W < m and the top-k entropy of q_j is
>= theta; a held rejection is confirmed (accepted) once the W drafts after it are natively
accepted, and any native rejection inside the window ends the step at j. The first rejection
left recovers from norm((q - p)+), all accepted draws the bonus from q_m. Enumerating every draft
sequence (V^m) and every pattern of native decisions (2^m) gives the exact law of the emitted row
(accepted drafts, then one token); `verify` must sample it (Monte Carlo, Pearson chi-square at
the suite's fixed level, `P_VALUE_FLOOR`). vLLM's config defaults W to min(6, m - 1) and refuses
W >= m, W = 0 and m < 2 (0.33's `SpeculativeConfig`); the rule and the run's checks do the same.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from helpers.laws import P_VALUE_FLOOR, chi_square_p_value, laws, step_law, top_entropy

from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")


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


# theta, W, m, seed of laws, entropy top-k on which FLy's step law is >= 0.05 in TV from SpS's
CASES = [(0.3, 1, 3, 2, 3), (0.3, 2, 3, 5, 3), (0.0, 1, 2, 1, 3), (0.6, 1, 4, 3, 3)]
CASES += [(0.4, 1, 3, 6, 2)]  # top-2: its gate opens at fewer positions than top-3 (TV 0.25)


@pytest.mark.parametrize(("theta", "window", "m", "seed", "top_k"), CASES)
def test_verify_samples_the_enumerated_law(theta, window, m, seed, top_k):
    draft, target = laws(seed, m=m, vocab=3)
    law = step_law(draft.tolist(), target.tolist(), theta, window, top_k)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    sps = step_law(draft.tolist(), target.tolist(), math.inf, window)  # the gate never opens
    rows = set(law) | set(sps)
    assert 0.5 * sum(abs(law.get(r, 0.0) - sps.get(r, 0.0)) for r in rows) > 0.05
    rule = make_sampler("fly", entropy_threshold=theta, window=window, entropy_top_k=top_k)
    samples = 60_000
    counts = sample_rows(rule, draft, target, samples, seed=3)
    assert chi_square_p_value(counts, law, samples) > P_VALUE_FLOOR
    assert chi_square_p_value(counts, sps, samples) < P_VALUE_FLOOR  # the test has power
    if top_k != 3:  # the parameter reaches the gate: top-3's law is another one
        other = step_law(draft.tolist(), target.tolist(), theta, window, 3)
        assert chi_square_p_value(counts, other, samples) < P_VALUE_FLOOR


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
    low, high = sorted(top_entropy(row) for row in t[:2])
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


def test_the_default_window_is_vllms_min_6_m_minus_1():
    """`window: auto` runs W = min(6, m - 1) at each m: token for token the rule with that W,
    and a different rule from the next W (so the default is not SpS at m <= 6)."""
    for m, width in ((2, 1), (4, 3), (8, 6)):
        draft, target = laws(seed=m, m=m, vocab=4)
        draft = 0.8 * target[:m] + 0.05  # close laws: runs of W native acceptances
        samples = 4_000
        gen = torch.Generator().manual_seed(0)
        ids = torch.stack(
            [torch.multinomial(draft[j], samples, True, generator=gen) for j in range(m)], dim=1
        )
        args = (ids, draft.expand(samples, m, 4), target.expand(samples, m + 1, 4))

        def accepted(rule, args=args):
            return rule.verify(*args, torch.Generator().manual_seed(1)).num_accepted

        auto = accepted(make_sampler("fly", entropy_threshold=0.0))
        assert make_sampler("fly").params()["window"] == "auto"
        assert torch.equal(auto, accepted(make_sampler("fly", entropy_threshold=0.0, window=width)))
        sps = accepted(make_sampler("sps"))
        assert (auto >= sps).all() and (auto > sps).any()  # same draws: only overrides
        if width > 1:
            narrower = make_sampler("fly", entropy_threshold=0.0, window=width - 1)
            assert not torch.equal(auto, accepted(narrower))


def test_window_zero_or_too_wide_is_refused_in_one_line():
    from cactus_bench.samplers.rules.fly import window_for

    with pytest.raises(ValueError, match=r"window must be >= 1 for fly"):
        make_sampler("fly", window=0)
    with pytest.raises(ValueError, match=r"window must be a number or 'auto' for fly"):
        make_sampler("fly", window="six")
    with pytest.raises(ValueError, match=r"entropy_top_k must be >= 1 for fly"):
        make_sampler("fly", entropy_top_k=0)
    assert [window_for("auto", m) for m in (2, 3, 7, 8, 20)] == [1, 2, 6, 6, 6]
    assert window_for(2, 3) == 2
    for window, m, text in ((2, 2, "window < m"), (6, 4, "window < m"), ("auto", 1, "m >= 2")):
        with pytest.raises(ValueError, match=text) as caught:
            window_for(window, m)
        assert "\n" not in str(caught.value)


def test_a_draft_shorter_than_the_window_defers_nothing():
    """The budget's last step may draft fewer than m tokens: where W does not fit, FLy is SpS
    there token for token (vLLM's kernel: i + W < num_draft_tokens), never an error."""
    draft, target = laws(seed=2, m=2, vocab=6)
    samples = 2_000
    gen = torch.Generator().manual_seed(0)
    ids = torch.stack([torch.multinomial(draft[j], samples, True, generator=gen) for j in range(2)])
    args = (ids.T.contiguous(), draft.expand(samples, 2, 6), target.expand(samples, 3, 6))
    short = (args[0][:, :1], args[1][:, :1], args[2][:, :2])  # one draft: auto's W = 0
    for rule, drafts in (
        (make_sampler("fly", entropy_threshold=0.0, window=2), args),
        (make_sampler("fly", entropy_threshold=0.0), short),
    ):
        out = rule.verify(*drafts, torch.Generator().manual_seed(1))
        sps = make_sampler("sps").verify(*drafts, torch.Generator().manual_seed(1))
        assert torch.equal(out.token_ids, sps.token_ids)
    # the test has power: on the same two-token drafts a window that fits does defer
    opened = make_sampler("fly", entropy_threshold=0.0, window=1)
    fitted = opened.verify(*args, torch.Generator().manual_seed(1)).num_accepted
    sps = make_sampler("sps").verify(*args, torch.Generator().manual_seed(1)).num_accepted
    assert (fitted > sps).any()


def test_the_runs_checks_resolve_and_refuse_the_window_before_loading():
    """`window: auto` becomes vLLM's min(6, m - 1) in the checked parameters (so the row's
    fly_window column and the config hash hold the W decoded); W >= m, W = 0 and m < 2 are
    one-line ConfigErrors from validate(), which imports no torch."""
    from helpers.runs import compose_run_conf

    from cactus_bench.run.checks import ConfigError, validate

    def window(*overrides):
        return validate(compose_run_conf(["sampler=fly", *overrides])).window

    assert [window(f"m={m}") for m in (2, 5, 10)] == [1, 4, 6]
    assert window("m=4", "sampler.window=2") == 2
    assert window("m=3", "sampler.entropy_top_k=5") == 2
    for overrides, text in (
        (["m=2", "sampler.window=2"], "window < m"),
        (["m=4", "sampler.window=0"], "window must be >= 1 for fly"),
        (["m=1"], "fly needs m >= 2"),
        (["m=3", "sampler.window=many"], "window must be a number or 'auto'"),
    ):
        with pytest.raises(ConfigError, match=text) as caught:
            compose_run_conf(["sampler=fly", *overrides])
        assert "\n" not in str(caught.value)
