"""Batched sampling from one model (engine/batch_generate.py) on the tiny pair: left padding and
rows leaving the batch change no token, and the kept law of each step is the model's own."""

import pytest
import torch

from cactus_bench.engine.sampling import SamplingParams, process_logits

pytestmark = pytest.mark.usefixtures("single_thread")


def test_batched_greedy_generation_equals_one_prompt_at_a_time(tiny_pair):
    from cactus_bench.engine import AutoregressiveDecoder, SamplingParams
    from cactus_bench.engine.batch_generate import sample_continuations

    _, verifier, tokenizer = tiny_pair
    prompts = [tokenizer.encode(t) for t in ("The answer is", "Q", "2 + 2 = 4 and the")]
    greedy = SamplingParams(temperature=0.0)
    eos = [tokenizer.eos_token_id]
    out = sample_continuations(
        verifier,
        prompts,
        12,
        greedy,
        eos,
        tokenizer.pad_token_id,
        batch_size=3,
        show_progress=False,
    )
    single = AutoregressiveDecoder(verifier, tokenizer, sampling=greedy, fast="off")
    for prompt, tokens in zip(prompts, out.tokens, strict=True):
        assert tokens == single.generate(prompt, max_new_tokens=12, seed=0).output_ids


def test_rows_that_stop_early_leave_the_batch_without_disturbing_the_others(tiny_pair):
    """One row's first greedy token is made an end-of-sequence id: that row stops at once and
    leaves the batch (its cache rows are dropped); every row still equals its lone decode."""
    from cactus_bench.engine import AutoregressiveDecoder, SamplingParams
    from cactus_bench.engine.batch_generate import sample_continuations

    _, verifier, tokenizer = tiny_pair
    prompts = [tokenizer.encode(t) for t in ("Hello", "The answer is 42.", "a b c", "Q: x")]
    greedy = SamplingParams(temperature=0.0)
    single = AutoregressiveDecoder(verifier, tokenizer, sampling=greedy, fast="off")
    first = single.generate(prompts[1], max_new_tokens=1, seed=0).output_ids[0]
    eos = [first, tokenizer.eos_token_id]
    out = sample_continuations(
        verifier,
        prompts,
        10,
        greedy,
        eos,
        tokenizer.pad_token_id,
        batch_size=4,
        show_progress=False,
        keep_top=3,
    )
    assert out.tokens[1] == [first]
    lone = AutoregressiveDecoder(
        verifier, tokenizer, sampling=greedy, eos_token_ids=eos, fast="off"
    )
    for prompt, tokens, kept in zip(prompts, out.tokens, out.top_ids, strict=True):
        assert tokens == lone.generate(prompt, max_new_tokens=10, seed=0).output_ids
        assert kept.shape == (len(tokens), 3)


def test_kept_law_is_the_teacher_forced_law(tiny_pair):
    from cactus_bench.engine import SamplingParams
    from cactus_bench.engine.batch_generate import sample_continuations
    from cactus_bench.frontier.teacher_forcing import answer_laws

    _, verifier, tokenizer = tiny_pair
    prompts = [tokenizer.encode(t) for t in ("Hello there", "The answer of the", "x")]
    sampling = SamplingParams(0.6, 0.95, 20)
    out = sample_continuations(
        verifier,
        prompts,
        16,
        sampling,
        [tokenizer.eos_token_id],
        tokenizer.pad_token_id,
        batch_size=2,
        seed=3,
        keep_top=20,
        show_progress=False,
    )
    for prompt, tokens, ids, probs in zip(
        prompts, out.tokens, out.top_ids, out.top_probs, strict=True
    ):
        law = answer_laws(verifier, prompt, tokens, sampling, None)  # [T, V]
        kept = torch.zeros_like(law).scatter_(-1, ids, probs)
        torch.testing.assert_close(kept, law, atol=2e-5, rtol=0)
        sampled = law.gather(-1, torch.tensor(tokens)[:, None])
        assert torch.all(sampled > 0)  # each token was drawn from its recorded law


def test_draws_over_the_top_k_support_follow_the_processed_law():
    """The batched sampler draws over the top-k support of the processed law: a chi-square
    test of 40,000 draws from one row against that law (fixed seed)."""
    from scipy.stats import chisquare

    from cactus_bench.engine.batch_generate import _draw

    generator = torch.Generator().manual_seed(0)
    sampling = SamplingParams(temperature=1.0, top_p=0.9, top_k=8)
    logits = torch.randn(1, 50, generator=generator)  # [1, V]
    law = process_logits(logits, sampling)[0]  # [V], <= 8 ids with mass
    tokens = _draw(law.expand(40_000, -1).contiguous(), sampling, generator)  # [N]
    counts = torch.bincount(tokens, minlength=50).double()
    support = law > 0
    assert counts[~support].sum() == 0
    expected = law[support].double() / law[support].double().sum() * counts.sum()
    assert chisquare(counts[support].numpy(), expected.numpy()).pvalue > 1e-3
