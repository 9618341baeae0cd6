"""Statistical tests: the engine samples the laws the theory says (fixed seeds, chi-square).

With top-k small the verifier's exact joint law of the first tokens can be enumerated by plain
forwards (no cache), which also checks the cached, rolled-back decoding independently. Every
test first shows that its check rejects a wrong law, so that it can fail.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from helpers.laws import P_VALUE_FLOOR, chi_square_p_value, next_token_law

from cactus_bench.engine import (
    AutoregressiveDecoder,
    BatchRequest,
    SamplingParams,
    SpeculativeDecoder,
)
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread", "forward_path")


PROMPT = [41]  # one token: no prefill, so each request costs only its decode forwards
# Batched laws: rows of two prompt lengths in one batch, so rows sit at different positions.
LONG_PROMPT = [72, 101, 108, 108, 111]


def two_sample_p_value(first: Counter, second: Counter) -> float:
    """Chi-square test of homogeneity of two samples over pooled cells."""
    total_a, total_b = sum(first.values()), sum(second.values())
    pooled = first + second
    law = {key: count / (total_a + total_b) for key, count in pooled.items()}
    stat, df, small_a, small_b, small_e = 0.0, -1, 0, 0, 0.0
    for key, prob in law.items():
        if min(total_a, total_b) * prob < 5:
            small_a, small_b = small_a + first.get(key, 0), small_b + second.get(key, 0)
            small_e += prob
            continue
        for count, total in ((first.get(key, 0), total_a), (second.get(key, 0), total_b)):
            stat += (count - total * prob) ** 2 / (total * prob)
        df += 1
    if small_e > 0:
        for count, total in ((small_a, total_a), (small_b, total_b)):
            stat += (count - total * small_e) ** 2 / (total * small_e)
        df += 1
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0)))


def exact_joint_law(model, prompt, sampling, length: int) -> dict[tuple[int, ...], float]:
    """Exact law of the first `length` tokens, enumerating each processed support."""
    law = {(): 1.0}
    for _ in range(length):
        grown = {}
        for prefix, prob in law.items():
            probs = next_token_law(model, prompt + list(prefix), sampling)
            for token in torch.nonzero(probs).flatten().tolist():
                grown[prefix + (token,)] = prob * float(probs[token])
        law = grown
    return law


@pytest.mark.slow
def test_sps_joint_law_of_three_tokens_matches_the_verifier(tiny_pair):
    drafter, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=0.9, top_k=3, top_p=0.9)  # supports of 1-3 tokens
    law = exact_joint_law(verifier, PROMPT, sampling, length=3)
    assert abs(sum(law.values()) - 1) < 1e-9 and 4 <= len(law) <= 27
    n = 800
    spec = SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        make_sampler("sps"),
        num_draft_tokens=2,
        sampling=sampling,
        eos_token_ids=[],
    )
    base = AutoregressiveDecoder(verifier, tok, sampling=sampling, eos_token_ids=[])
    spec_counts, base_counts = Counter(), Counter()
    accepted = Counter()
    for seed in range(n):
        rec = spec.generate(PROMPT, max_new_tokens=3, seed=seed)
        spec_counts[tuple(rec.output_ids)] += 1
        accepted[rec.accepted_per_step[0]] += 1
        base_counts[tuple(base.generate(PROMPT, max_new_tokens=3, seed=seed).output_ids)] += 1
    assert set(accepted) == {0, 1, 2}  # every acceptance path contributed
    assert chi_square_p_value(spec_counts, law, n) > P_VALUE_FLOOR
    assert chi_square_p_value(base_counts, law, n) > P_VALUE_FLOOR
    assert two_sample_p_value(spec_counts, base_counts) > P_VALUE_FLOOR
    # The check has power: the drafter's own joint law is rejected.
    drafter_law = exact_joint_law(drafter, PROMPT, sampling, length=3)
    assert chi_square_p_value(spec_counts, drafter_law, n) < P_VALUE_FLOOR


def test_cactus_first_token_law_matches_output_distribution(tiny_pair):
    drafter, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=1.0, top_k=6)
    rule = make_sampler("cactus", delta=1.0)
    p = next_token_law(drafter, PROMPT, sampling)
    q = next_token_law(verifier, PROMPT, sampling)
    predicted = rule.output_distribution(p.float(), q.float())
    support = torch.nonzero(predicted > 1e-12).flatten().tolist()
    law = {(t,): float(predicted[t]) for t in support}
    target = {(t,): float(q[t]) for t in torch.nonzero(q).flatten().tolist()}
    # Every token id is an EOS, so each request stops after its first emitted token; with
    # max_new_tokens 2 and m = 1 the first step drafts exactly one token.
    dec = SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        rule,
        num_draft_tokens=1,
        sampling=sampling,
        eos_token_ids=range(verifier.config.vocab_size),
    )
    n = 600
    counts = Counter()
    for seed in range(n):
        rec = dec.generate(PROMPT, max_new_tokens=2, seed=seed)
        assert rec.drafted_per_step == [1] and rec.stop_reason == "eos"
        counts[tuple(rec.output_ids)] += 1
    assert chi_square_p_value(counts, law, n) > P_VALUE_FLOOR
    # Cactus is lossy here: the same sample rejects the verifier's own law q.
    assert sum(abs(law.get(k, 0) - target.get(k, 0)) for k in law.keys() | target.keys()) > 0.1
    assert chi_square_p_value(counts, target, n) < P_VALUE_FLOOR


def batched_outputs(decoder, prompts, n, max_new_tokens, batch=4):
    """n requests per prompt (seeds 0..n-1 each), interleaved, through `batch` slots;
    -> ({prompt: [outputs]}, step log). Rows of one step differ in prompt length and usually in
    accepted length; each draws from its own seed's generator."""
    requests = [
        BatchRequest(prompt, max_new_tokens, seed=seed) for seed in range(n) for prompt in prompts
    ]
    records = decoder.generate_batch(requests, batch=batch)
    outputs = {tuple(prompt): [] for prompt in prompts}
    for request, record in zip(requests, records, strict=True):
        outputs[tuple(request.prompt_ids)].append(tuple(record.output_ids))
    return outputs, decoder.step_log


def mixed_steps(log) -> int:
    """Decode steps whose rows accepted different numbers of drafts."""
    return sum(1 for step in log if step.kind == "decode" and len(set(step.accepted)) > 1)


def test_cactus_first_token_law_at_batch_four(tiny_pair, forward_path):
    """The rule's first-token law (lossy: not the verifier's) per prompt, at batch 4 with rows
    of different prompt lengths and different accepted lengths in the same step (m = 2, three
    tokens per request)."""
    if forward_path == "off":
        pytest.skip("HF's forward has no batched path (batch > 1 is refused)")
    drafter, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=1.0, top_k=6)
    rule = make_sampler("cactus", delta=1.0)
    dec = SpeculativeDecoder(
        drafter, verifier, tok, rule, num_draft_tokens=2, sampling=sampling, eos_token_ids=[]
    )
    n = 500
    outputs, log = batched_outputs(dec, [PROMPT, LONG_PROMPT], n, max_new_tokens=3)
    assert mixed_steps(log) > 50 and max(step.rows for step in log) == 4
    for prompt, outs in outputs.items():
        p = next_token_law(drafter, list(prompt), sampling)
        q = next_token_law(verifier, list(prompt), sampling)
        predicted = rule.output_distribution(p.float(), q.float())
        support = torch.nonzero(predicted > 1e-12).flatten().tolist()
        law = {(t,): float(predicted[t]) for t in support}
        target = {(t,): float(q[t]) for t in torch.nonzero(q).flatten().tolist()}
        counts = Counter(out[:1] for out in outs)
        assert chi_square_p_value(counts, law, n) > P_VALUE_FLOOR
        # Power: the verifier's own law differs enough here to be rejected by the same sample.
        assert sum(abs(law.get(k, 0) - target.get(k, 0)) for k in law.keys() | target.keys()) > 0.1
        assert chi_square_p_value(counts, target, n) < P_VALUE_FLOOR


@pytest.mark.slow
def test_sps_joint_law_of_three_tokens_at_batch_four(tiny_pair, forward_path):
    """SpS is exact: at batch 4, with rows of two prompt lengths accepting 0, 1 or 2 drafts in
    the same steps, each prompt's first three tokens follow the verifier's joint law."""
    if forward_path == "off":
        pytest.skip("HF's forward has no batched path (batch > 1 is refused)")
    drafter, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=0.9, top_k=3, top_p=0.9)
    dec = SpeculativeDecoder(
        drafter, verifier, tok, make_sampler("sps"), 2, sampling=sampling, eos_token_ids=[]
    )
    n = 800
    outputs, log = batched_outputs(dec, [PROMPT, LONG_PROMPT], n, max_new_tokens=3)
    assert mixed_steps(log) > 100
    for prompt, outs in outputs.items():
        law = exact_joint_law(verifier, list(prompt), sampling, length=3)
        assert chi_square_p_value(Counter(outs), law, n) > P_VALUE_FLOOR
        drafter_law = exact_joint_law(drafter, list(prompt), sampling, length=3)
        assert chi_square_p_value(Counter(outs), drafter_law, n) < P_VALUE_FLOOR


def test_chi_square_helpers_reject_and_accept():
    law = {(0,): 0.5, (1,): 0.3, (2,): 0.2}
    generator = torch.Generator().manual_seed(0)
    draws = torch.multinomial(torch.tensor([0.5, 0.3, 0.2]), 2000, True, generator=generator)
    counts = Counter((int(t),) for t in draws)
    assert chi_square_p_value(counts, law, 2000) > P_VALUE_FLOOR
    assert chi_square_p_value(counts, {(0,): 0.4, (1,): 0.4, (2,): 0.2}, 2000) < P_VALUE_FLOOR
    assert chi_square_p_value(counts + Counter({(7,): 1}), law, 2001) == 0.0
    shifted = Counter({(0,): 800, (1,): 800, (2,): 400})
    assert two_sample_p_value(counts, counts) > 0.99
    assert two_sample_p_value(counts, shifted) < P_VALUE_FLOOR


def test_draft_draws_and_sps_acceptance_match_their_step_by_step_expectations(tiny_pair):
    """At every step, given the context: the drafted token n ~ p, so E[p(n)] = sum p^2; SpS
    accepts it with probability sum_x min(p, q). Summed over steps, realised minus expected is a
    martingale, so (realised - expected) / sqrt(sum of variances) is ~N(0, 1) whatever path the
    decoding took. This checks the engine's token draw (inverse CDF on a CPU) and the rule on
    real contexts over the full vocabulary, not only on one enumerable prompt."""
    drafter, verifier, tok = tiny_pair
    rule = make_sampler("sps")
    sums = Counter()

    class Recording:  # the rule, recording position 1 of every step
        name = "sps"

        def verify(self, draft_ids, draft_probs, target_probs, generator=None, **draws):
            p, q = (probs[0, 0].double() for probs in (draft_probs, target_probs))
            p, q = p / p.sum(), q / q.sum()
            p_n = float(p[draft_ids[0, 0]])
            accept = float(torch.minimum(p, q).sum())
            out = rule.verify(draft_ids, draft_probs, target_probs, generator=generator, **draws)
            accepted = int((out.token_ids[0] >= 0).sum()) - 1 >= 1
            squares, cubes, cross = float((p * p).sum()), float((p**3).sum()), float((p * q).sum())
            sums.update(steps=1, p_n=p_n, p_n_expected=squares, p_n_variance=cubes - squares**2)
            sums.update(p_n_if_argmax=float(p.max()), accepted=accepted, accept_expected=accept)
            sums.update(accept_variance=accept * (1 - accept), accept_if_q_n=cross)
            return out

    sampling = SamplingParams(temperature=1.0)  # the whole vocabulary can be drawn
    dec = SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        Recording(),
        num_draft_tokens=2,
        sampling=sampling,
        eos_token_ids=[],
    )
    for seed in range(60):
        dec.generate(PROMPT, max_new_tokens=24, seed=seed)
    assert sums["steps"] >= 500

    def z(observed: str, expected: str, variance: str) -> float:
        return (sums[observed] - sums[expected]) / sums[variance] ** 0.5

    assert abs(z("p_n", "p_n_expected", "p_n_variance")) < 4
    assert abs(z("accepted", "accept_expected", "accept_variance")) < 4
    # Power: drawing the argmax of p, or accepting with probability q(n), is rejected.
    assert abs(z("p_n", "p_n_if_argmax", "p_n_variance")) > 4
    assert abs(z("accepted", "accept_if_q_n", "accept_variance")) > 4
