"""The engine in bfloat16 (what dtype=auto picks on a CPU with hardware bf16), on both forward
paths: greedy speculative decoding emits the greedy autoregressive tokens, and sampling follows
the verifier's law.

Why greedy equality needs care in bf16: the verifier scores m + 1 tokens in one forward when
verifying and one token per forward when decoding alone. A kernel may round a row differently
depending on how many rows it computes with (fp32: differences ~1e-6; bf16: a few units in the
last place, ~0.1 on SmolLM2's logits). So the engine guarantees: every emitted greedy token is
the argmax of the verifier's logits as its verify forward computed them; it equals the
autoregressive token wherever the two forwards agree, which is bit for bit when the kernels
are row-invariant (checked below on this CPU) and otherwise up to the first near-tie.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
import torch
from helpers.laws import P_VALUE_FLOOR, chi_square_p_value, next_token_law

from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder, runtime
from cactus_bench.engine.cpu_kernels import resolve_linear_kernel
from cactus_bench.engine.runtime import make_runner
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread", "forward_path")
GREEDY = SamplingParams(temperature=0.0)
PROMPTS = ([72, 101, 108, 108, 111], [286, 84, 82, 68, 81, 198, 41])


@pytest.fixture(autouse=True)
def bf16_packs_or_skip(forward_path):
    """The all-oneDNN path needs oneDNN's bf16 products (AVX512-BW/VL/DQ or AVX-NE-CONVERT);
    elsewhere the fast forward keeps bf16 on ATen, which the other paths test."""
    on_packs = runtime.DEFAULT_LINEAR_KERNEL == "onednn"
    if on_packs and resolve_linear_kernel("auto", torch.device("cpu"), torch.bfloat16) != "onednn":
        pytest.skip("oneDNN cannot pack bfloat16 weights on this CPU")


@pytest.fixture(scope="module")
def bf16_pair(tiny_pair):
    drafter, verifier, tokenizer = tiny_pair
    return copy.deepcopy(drafter).bfloat16(), copy.deepcopy(verifier).bfloat16(), tokenizer


def rows_are_shape_invariant(verifier, fast: str, prompt, tokens) -> bool:
    """Whether one forward over `tokens` gives bit for bit the logits of len(tokens) one-token
    forwards on this path and CPU (the condition for exact greedy equality)."""
    runner = make_runner(verifier, torch.device("cpu"), fast=fast)
    ids = torch.tensor([tokens])  # [1, n]
    with torch.inference_mode():
        cache = runner.prefilled_cache(prompt)
        together = runner.forward(ids, cache, all_logits=True)
        cache = runner.prefilled_cache(prompt)
        one_by_one = [runner.forward(ids[:, i : i + 1], cache, True) for i in range(len(tokens))]
    return torch.equal(together, torch.cat(one_by_one, dim=1))


def top2_gaps(verifier, prompt, output) -> list[float]:
    """Per emitted token, the gap between the top-2 logits of HF's bf16 forward over the whole
    sequence, in bf16 units at the logits' scale."""
    with torch.inference_mode():
        logits = verifier(input_ids=torch.tensor([prompt + output])).logits[0].float()
    unit = 2.0**-8 * float(logits.abs().max())
    top = logits[len(prompt) - 1 : -1].topk(2, dim=-1).values  # [len(output), 2]
    return ((top[:, 0] - top[:, 1]) / unit).tolist()


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
def test_bf16_greedy_speculative_equals_greedy_autoregressive(bf16_pair, forward_path, m):
    drafter, verifier, tok = bf16_pair
    base = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[])
    for prompt in PROMPTS:
        expected = base.generate(prompt, max_new_tokens=40).output_ids
        exact = rows_are_shape_invariant(verifier, forward_path, prompt[:-1], expected[:8])
        gaps = top2_gaps(verifier, prompt, expected)
        for draft_model in (drafter, verifier):
            rule = make_sampler("sps")
            spec = SpeculativeDecoder(
                draft_model, verifier, tok, rule, m, sampling=GREEDY, eos_token_ids=[]
            )
            rec = spec.generate(prompt, max_new_tokens=40)
            assert rec.num_generated == 40 and rec.sampler_name == "greedy"
            if exact:
                assert rec.output_ids == expected
            else:  # the first difference may only come at a near-tie (within 4 bf16 units)
                same = [a == b for a, b in zip(rec.output_ids, expected, strict=True)]
                first = same.index(False) if False in same else len(same)
                assert first == len(same) or gaps[first] <= 4, (first, gaps[first])


def test_bf16_cactus_first_token_law_matches_output_distribution(bf16_pair):
    """As tests/test_engine_laws.py checks in fp32: with bf16 models, the engine's first token
    follows the rule's output law computed from the bf16 drafter's and verifier's p and q."""
    drafter, verifier, tok = bf16_pair
    sampling = SamplingParams(temperature=1.0, top_k=6)
    rule = make_sampler("cactus", delta=1.0)
    p, q = (next_token_law(model, [41], sampling) for model in (drafter, verifier))
    predicted = rule.output_distribution(p.float(), q.float())
    law = {(t,): float(predicted[t]) for t in torch.nonzero(predicted > 1e-12).flatten().tolist()}
    decoder = SpeculativeDecoder(
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
        rec = decoder.generate([41], max_new_tokens=2, seed=seed)
        assert rec.drafted_per_step == [1]
        counts[tuple(rec.output_ids)] += 1
    assert chi_square_p_value(counts, law, n) > P_VALUE_FLOOR
    # The check has power: the drafter's own law is rejected.
    drafter_law = {(t,): float(p[t]) for t in torch.nonzero(p).flatten().tolist()}
    assert chi_square_p_value(counts, drafter_law, n) < P_VALUE_FLOOR
