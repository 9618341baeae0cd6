"""Logits processing against HF's own warpers, and the tiny model pair / tokenizer contract."""

from __future__ import annotations

import time

import pytest
import torch
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from cactus_bench.engine import SamplingParams, process_logits, sample_token
from cactus_bench.engine.stopping import cut_at_stop
from cactus_bench.models.tiny import make_tiny_pair, make_tiny_tokenizer


def hf_reference(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """HF generate's sampling path: temperature, then top-k, then top-p, then softmax."""
    scores = TemperatureLogitsWarper(params.temperature)(None, logits.clone())
    if params.top_k:
        scores = TopKLogitsWarper(params.top_k)(None, scores)
    if params.top_p < 1:
        scores = TopPLogitsWarper(params.top_p)(None, scores)
    return scores.softmax(dim=-1)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(1.0),
        SamplingParams(0.6, top_p=0.95, top_k=20),  # the paper's setting
        SamplingParams(0.7, top_p=0.8),
        SamplingParams(1.3, top_k=5),
        SamplingParams(0.5, top_p=0.5, top_k=50),
    ],
)
def test_process_logits_matches_hf_warpers(params):
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(4, 1000, generator=generator)  # [B, V]
    ours = process_logits(logits, params)
    torch.testing.assert_close(ours, hf_reference(logits, params), atol=1e-6, rtol=1e-5)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours.sum(-1), torch.ones(4))


def test_process_logits_shapes_greedy_and_masked_tokens():
    logits = torch.tensor([[0.0, 2.0, 2.0, -1.0], [5.0, float("-inf"), 1.0, 0.0]])
    greedy = process_logits(logits, SamplingParams(temperature=0))
    assert greedy.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]  # first index on ties
    probs = process_logits(logits.unsqueeze(0).expand(3, 2, 4), SamplingParams(top_k=3))
    assert probs.shape == (3, 2, 4) and probs[0, 1, 1] == 0  # -inf stays exactly zero
    assert probs[0, 0, 3] == 0  # outside the top 3
    nucleus = process_logits(torch.tensor([[3.0, 1.0, 0.0]]), SamplingParams(top_p=0.5))
    assert nucleus.tolist() == [[1.0, 0.0, 0.0]]  # the first token alone already reaches 0.5


def test_sampling_params_from_gen_kwargs():
    paper = SamplingParams(0.6, 0.95, 20)
    assert SamplingParams.from_gen_kwargs({"temperature": 0.0}, paper).is_greedy
    assert SamplingParams.from_gen_kwargs({"do_sample": False}, paper).is_greedy
    custom = SamplingParams.from_gen_kwargs({"top_k": None, "top_p": 0.5, "until": []}, paper)
    assert custom == SamplingParams(0.6, 0.5, 20)
    assert SamplingParams(top_k=None, top_p=None) == SamplingParams()


def test_cut_at_stop_is_lm_eval_until():
    text = "a. b\n\nQuestion: c\n\n"
    for stop in (["\n\n"], ["Question:", "\n\n"], ["zz"], ["", "b"], []):
        expected = text
        for term in stop:  # lm-eval's generate_until loop
            if term:
                expected = expected.split(term)[0]
        assert cut_at_stop(text, stop) == (expected, expected != text)


def test_tiny_pair_is_fast_deterministic_and_usable():
    start = time.perf_counter()
    drafter, verifier, tok = make_tiny_pair(seed=0)
    assert time.perf_counter() - start < 5  # well under a second normally; loose on a busy box
    assert sum(p.numel() for p in verifier.parameters()) > sum(
        p.numel() for p in drafter.parameters()
    )
    assert verifier.config.vocab_size == drafter.config.vocab_size == len(tok) < 400
    again = make_tiny_pair(seed=0)[1]
    other = make_tiny_pair(seed=1)[1]
    ids = torch.tensor([[72, 101, 108, 108, 111]])
    with torch.inference_mode():
        q = verifier(ids).logits[0, -1].softmax(-1)
        p = drafter(ids).logits[0, -1].softmax(-1)
        torch.testing.assert_close(again(ids).logits, verifier(ids).logits)
        assert not torch.allclose(other(ids).logits, verifier(ids).logits)
    entropy = -(q * q.log()).sum()
    assert entropy < 0.8 * torch.log(torch.tensor(float(len(tok))))  # not near-uniform
    overlap = torch.minimum(p, q).sum()  # 1 - TV: the per-token acceptance of SpS
    assert 0.2 < overlap < 0.97
    llama = make_tiny_pair(seed=0, arch="llama")[1]
    assert type(llama).__name__ == "LlamaForCausalLM"
    with pytest.raises(ValueError, match="arch"):
        make_tiny_pair(arch="gpt2")
    with pytest.raises(ValueError, match="vocab_size"):
        make_tiny_pair(vocab_size=10)


def test_tiny_tokenizer_round_trips_and_has_a_chat_template():
    tok = make_tiny_tokenizer()
    text = "The answer is 42.\n\nQ: naïve café — ok? 日本"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert max(ids) < len(tok) and len(ids) < len(text.encode())  # some merged tokens
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    assert tok.decode([tok.eos_token_id, 72], skip_special_tokens=True) == "H"


def test_sample_token_draws_the_law_and_never_a_zero_mass_id():
    # A processed law: mass on a few ids of a large vocabulary, as top-k leaves it.
    vocab, support = 5000, torch.tensor([3, 17, 4000, 4999])
    law = torch.tensor([0.1, 0.2, 0.3, 0.4])
    probs = torch.zeros(1, vocab).index_copy_(1, support, law[None])
    generator = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_token(probs, generator, greedy=False) for _ in range(4000)])
    assert draws.shape == (4000, 1) and draws.dtype == torch.long
    counts = torch.bincount(draws[:, 0], minlength=vocab)
    assert counts.sum() == counts[support].sum()  # nothing outside the support
    # Binomial s.d. of each frequency is <= 0.008 at n = 4000: 0.03 is > 3.5 s.d.
    assert torch.allclose(counts[support] / 4000.0, law, atol=0.03)
    assert sample_token(probs, None, greedy=True).tolist() == [[4999]]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.5, 0.0])
def test_sample_token_refuses_a_law_it_cannot_sample(bad):
    probs = torch.tensor([[0.5, 0.5, 0.0]])
    probs[0, 2] = bad
    if bad == 0.0:
        probs = torch.zeros(1, 3)
    with pytest.raises(ValueError, match="cannot sample a token"):
        sample_token(probs, torch.Generator().manual_seed(0), greedy=False)


def test_sample_token_refuses_a_batch_with_one_empty_row():
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])  # row 2 has no mass
    with pytest.raises(ValueError, match="sum to 0"):
        sample_token(probs, torch.Generator().manual_seed(0), greedy=False)
    assert sample_token(probs[:1], None, greedy=False).tolist() == [[1]]
