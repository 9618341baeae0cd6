"""Engine correctness on the tiny pair: greedy equivalence, self-drafting, cache roll-back,
stopping (EOS, stop strings, max_new_tokens), record bookkeeping and token maps."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from cactus_bench.engine import (
    AutoregressiveDecoder,
    RequestRecord,
    SamplingParams,
    SpeculativeDecoder,
)
from cactus_bench.engine.decoder import DecodeState
from cactus_bench.engine.fast_runner import FastRunner, StaticKVCache
from cactus_bench.engine.runtime import Clock, ModelRunner
from cactus_bench.models.tiny import make_tiny_pair
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread", "forward_path")


GREEDY = SamplingParams(temperature=0.0)
PAPER = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
PROMPTS = ([72, 101, 108, 108, 111], [286, 84, 82, 68, 81, 198, 41])  # "Hello", chat-like


def spec(drafter, verifier, tok, m, sampling=PAPER, rule="sps", **kwargs):
    return SpeculativeDecoder(
        drafter, verifier, tok, make_sampler(rule), num_draft_tokens=m, sampling=sampling, **kwargs
    )


def check_bookkeeping(rec: RequestRecord, m: int, max_new_tokens: int) -> None:
    assert rec.num_generated <= max_new_tokens
    assert len(rec.drafted_per_step) == len(rec.accepted_per_step) == len(rec.emitted_per_step)
    for drafted, accepted, emitted in zip(
        rec.drafted_per_step, rec.accepted_per_step, rec.emitted_per_step, strict=True
    ):
        assert 0 <= accepted <= drafted <= m
        assert emitted == accepted + 1
    assert sum(rec.emitted_per_step) >= rec.num_generated
    spent = rec.prefill_time_s + rec.draft_time_s + rec.verify_time_s + rec.sampler_time_s
    assert min(rec.prefill_time_s, rec.draft_time_s, rec.verify_time_s, rec.sampler_time_s) >= 0
    assert spent <= rec.total_time_s


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
def test_greedy_speculative_equals_greedy_autoregressive(tiny_pair, m):
    drafter, verifier, tok = tiny_pair
    base = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[])
    for prompt in PROMPTS:
        expected = base.generate(prompt, max_new_tokens=40).output_ids
        for draft_model in (drafter, verifier):  # a random drafter, then the verifier itself
            rec = spec(draft_model, verifier, tok, m, GREEDY, eos_token_ids=[]).generate(prompt, 40)
            assert rec.output_ids == expected
            assert rec.sampler_name == "greedy"  # temperature 0 switches to the greedy rule
            check_bookkeeping(rec, m, 40)
            assert sum(rec.emitted_per_step) == 40


def test_random_drafter_is_partly_accepted(tiny_pair):
    drafter, verifier, tok = tiny_pair
    rec = spec(drafter, verifier, tok, 4, eos_token_ids=[]).generate(PROMPTS[0], 96, seed=3)
    assert 0.5 < rec.accepted_length < 3.5  # neither useless nor identical to the verifier
    assert min(rec.accepted_per_step) < 4


@pytest.mark.parametrize("m", [1, 4, 7])
def test_self_drafting_accepts_every_draft(tiny_pair, m):
    _, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=0.8, top_k=20)
    rec = spec(verifier, verifier, tok, m, sampling, eos_token_ids=[]).generate(
        PROMPTS[1], 50, seed=7
    )
    assert rec.accepted_per_step == rec.drafted_per_step
    full_steps = rec.drafted_per_step[:-1]  # the last step may draft fewer (token budget)
    assert full_steps == [m] * len(full_steps)
    assert rec.accepted_length == pytest.approx(sum(rec.drafted_per_step) / rec.num_steps)


def _last_logits_fresh(model, token_ids):
    return model(input_ids=torch.tensor([token_ids])).logits[0, -1]


def _last_logits_cached(runner, cache, pending):
    if isinstance(cache, StaticKVCache):  # forward, then roll back by moving the length
        length = cache.length
        logits = runner.forward(pending, cache, all_logits=False)[0, -1]
        cache.crop(length)
        return logits
    cache = copy.deepcopy(cache)
    return runner.model(input_ids=pending, cache=cache, use_cache=True).logits[0, -1]


def test_cache_rollback_equals_fresh_forward(tiny_pair, forward_path):
    """After every step, both caches + their pending tokens give the logits of a fresh forward
    over the whole sequence, whatever was accepted (none, some, all, the bonus-only step)."""
    drafter, verifier, tok = tiny_pair
    m = 3
    dec = spec(drafter, verifier, tok, m, SamplingParams(temperature=1.0), eos_token_ids=[])
    runner_type = ModelRunner if forward_path == "off" else FastRunner
    assert isinstance(dec.verifier, runner_type) and isinstance(dec.drafter, runner_type)
    prompt = PROMPTS[1]
    record = RequestRecord(prompt_ids=prompt, num_draft_tokens=m)
    state = DecodeState(
        SamplingParams(temperature=1.0),
        torch.tensor([11]),
        record,
        Clock(torch.device("cpu")),
        seq_len=len(prompt),
    )
    sequence = list(prompt)
    budgets = [100] * 14 + [2, 1, 3, 1]  # 2: a one-draft step; 1: the verifier-only bonus step
    with torch.inference_mode():
        dec._start(state, prompt)
        for budget in budgets:
            sequence += dec._step(state, budget)
            assert state.seq_len == len(sequence)
            v_cache, d_cache = state.caches["verifier"], state.caches["drafter"]
            assert v_cache.get_seq_length() == len(sequence) - 1
            assert state.pending["verifier"].tolist() == [sequence[-1:]]
            pending_d = state.pending["drafter"]
            assert d_cache.get_seq_length() + pending_d.shape[1] == len(sequence)
            assert pending_d.tolist() == [sequence[d_cache.get_seq_length() :]]
            for runner, cache, pending in (
                (dec.verifier, v_cache, state.pending["verifier"]),
                (dec.drafter, d_cache, pending_d),
            ):
                fresh = _last_logits_fresh(runner.model, sequence)
                torch.testing.assert_close(
                    _last_logits_cached(runner, cache, pending), fresh, atol=1e-4, rtol=0
                )
    accepted = record.accepted_per_step[:14]
    assert 0 in accepted and m in accepted and any(0 < a < m for a in accepted)
    assert record.drafted_per_step[14:] == [1, 0, 2, 0]


def test_sliding_window_verifier_rolls_back(tiny_pair):
    """Sliding-window layers keep only their window unless they record the past; roll-back past
    the window must still work (as for Gemma 2 / Qwen3 with use_sliding_window)."""
    drafter, verifier, tok = tiny_pair
    config = verifier.config.to_dict()
    config.update(use_sliding_window=True, sliding_window=6, max_window_layers=1, layer_types=None)
    sliding = Qwen3ForCausalLM(Qwen3Config(**config)).eval()
    sliding.load_state_dict(verifier.state_dict())
    prompt, sequence = list(range(60, 75)), list(range(60, 75))  # prompt longer than the window
    with torch.inference_mode():
        for _ in range(30):  # greedy by fresh full forwards: the reference
            sequence.append(int(sliding(torch.tensor([sequence])).logits[0, -1].argmax()))
    base = AutoregressiveDecoder(sliding, tok, sampling=GREEDY, eos_token_ids=[])
    assert base.generate(prompt, 30).output_ids == sequence[len(prompt) :]
    for draft_model in (drafter, sliding):
        rec = spec(draft_model, sliding, tok, 4, GREEDY, eos_token_ids=[]).generate(prompt, 30)
        assert rec.output_ids == sequence[len(prompt) :]


@pytest.mark.parametrize("m", [1, 3, 5])
@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 17])
def test_max_new_tokens_is_never_exceeded(tiny_pair, m, max_new_tokens):
    drafter, verifier, tok = tiny_pair
    rec = spec(verifier, verifier, tok, m, eos_token_ids=[]).generate(
        PROMPTS[0], max_new_tokens, seed=1
    )
    assert rec.num_generated == max_new_tokens and rec.stop_reason == "length"
    assert sum(rec.emitted_per_step) == max_new_tokens  # the last step drafts fewer tokens
    check_bookkeeping(rec, m, max_new_tokens)


def _greedy_reference(tiny_pair, n=48):
    _, verifier, tok = tiny_pair
    base = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[])
    return base.generate(PROMPTS[0], n)


def test_eos_stops_after_the_eos_token(tiny_pair):
    drafter, verifier, tok = tiny_pair
    full = _greedy_reference(tiny_pair).output_ids
    eos = full[9]
    cut = full.index(eos) + 1  # the EOS token is kept, everything after it dropped
    decoders = (
        AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[eos]),
        spec(drafter, verifier, tok, 4, GREEDY, eos_token_ids=[eos]),
        spec(verifier, verifier, tok, 6, GREEDY, eos_token_ids=[eos]),
    )
    for dec in decoders:
        rec = dec.generate(PROMPTS[0], 48)
        assert rec.output_ids == full[:cut] and rec.stop_reason == "eos"
        assert sum(rec.emitted_per_step) >= cut


def test_default_eos_ids_come_from_tokenizer_and_model(tiny_pair):
    _, verifier, tok = tiny_pair
    dec = AutoregressiveDecoder(verifier, tok)
    assert dec.eos_token_ids == {tok.eos_token_id}
    assert AutoregressiveDecoder(verifier, tok, eos_token_ids=[]).eos_token_ids == set()


def _printable_pairs(text: str) -> list[int]:
    return [
        i
        for i in range(len(text) - 1)
        if text[i : i + 2].isascii() and text[i : i + 2].isprintable()
    ]


def test_stop_strings_cut_like_lm_eval(tiny_pair):
    """Same seed with and without stop strings: the stopped output is the lm-eval cut."""
    drafter, verifier, tok = tiny_pair
    decoders = (
        AutoregressiveDecoder(verifier, tok, sampling=PAPER, eos_token_ids=[]),
        spec(drafter, verifier, tok, 3, eos_token_ids=[]),
        spec(verifier, verifier, tok, 8, eos_token_ids=[]),
    )
    for dec in decoders:
        full = dec.generate(PROMPTS[0], 60, seed=4)
        text = full.text
        starts = _printable_pairs(text)
        assert len(starts) >= 4
        # Two stop strings from the text itself: the earliest occurrence of either wins.
        late, early = text[starts[-1] : starts[-1] + 2], text[starts[1] : starts[1] + 2]
        expected = text[: min(text.find(late), text.find(early))]
        rec = dec.generate(PROMPTS[0], 60, stop=[late, "", early], seed=4)
        assert rec.text == expected and rec.stop_reason == "stop"
        assert rec.output_ids == full.output_ids[: len(rec.output_ids)]
        # The shortest token prefix whose text covers the cut text.
        assert tok.decode(rec.output_ids, skip_special_tokens=True).startswith(expected)
        assert not tok.decode(rec.output_ids[:-1], skip_special_tokens=True).startswith(expected)
        assert rec.num_steps < full.num_steps  # generation ended early
        check_bookkeeping(rec, getattr(dec, "num_draft_tokens", 0), 60)


def test_stop_string_inside_a_multibyte_token():
    tok = make_tiny_pair(seed=0)[2]
    from cactus_bench.engine.stopping import OutputTracker

    ids = tok("x = 4 and the answer is 42.\n\nQ: next")["input_ids"]
    assert tok.convert_ids_to_tokens(ids).count("Ġthe") == 1  # " the" is one token
    tracker = OutputTracker(tok, eos_token_ids=[], stop=["he a", "Q:"], max_new_tokens=100)
    for token in ids:  # one token per step: the stop must be found across steps
        tracker.extend([token])
        if tracker.done:
            break
    output_ids, text, reason = tracker.finish()
    assert (text, reason) == ("x = 4 and t", "stop")
    assert tok.decode(output_ids) == "x = 4 and the"  # the token carrying the cut is kept


def test_record_round_trips_through_json(tiny_pair):
    drafter, verifier, tok = tiny_pair
    rec = spec(drafter, verifier, tok, 3).generate(PROMPTS[0], 20, seed=5, stop=["zz"])
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["num_steps"] == rec.num_steps and data["accepted_length"] == rec.accepted_length
    assert data["sampler_name"] == "sps" and data["sampling"]["top_k"] == 20
    assert RequestRecord.from_dict(data) == rec
    check_bookkeeping(rec, 3, 20)


def test_same_seed_same_tokens(tiny_pair):
    drafter, verifier, tok = tiny_pair
    dec = spec(drafter, verifier, tok, 4, rule="cactus")
    first, again = (dec.generate(PROMPTS[1], 30, seed=99) for _ in range(2))
    other = dec.generate(PROMPTS[1], 30, seed=100)
    assert first.output_ids == again.output_ids
    assert first.accepted_per_step == again.accepted_per_step
    assert other.output_ids != first.output_ids
    assert dec.generate(PROMPTS[1], 5).seed is not None  # a random seed is drawn and recorded


def test_token_map_identity_and_subset(tiny_pair):
    drafter, verifier, tok = tiny_pair
    vocab = verifier.config.vocab_size
    expected = _greedy_reference(tiny_pair, 32).output_ids
    identity = torch.arange(vocab)
    rec = spec(drafter, verifier, tok, 3, GREEDY, eos_token_ids=[], token_map=identity)
    assert rec.generate(PROMPTS[0], 32).output_ids == expected

    # Only even ids allowed: sampling stays inside, and greedy matches the restricted baseline.
    subset = torch.arange(0, vocab, 2)
    base = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[], token_map=subset)
    restricted = base.generate(PROMPTS[0], 32).output_ids
    assert restricted != expected and all(t % 2 == 0 for t in restricted)
    greedy = spec(drafter, verifier, tok, 3, GREEDY, eos_token_ids=[], token_map=subset)
    assert greedy.generate(PROMPTS[0], 32).output_ids == restricted
    sampled = spec(drafter, verifier, tok, 3, eos_token_ids=[], token_map=subset)
    rec = sampled.generate(PROMPTS[0], 40, seed=2)
    assert all(t % 2 == 0 for t in rec.output_ids) and rec.num_generated == 40


def test_token_map_bridges_different_embedding_sizes(tiny_pair):
    _, verifier, tok = tiny_pair
    big_drafter = make_tiny_pair(seed=1, vocab_size=verifier.config.vocab_size + 32)[0]
    with pytest.raises(ValueError, match="token_map"):
        spec(big_drafter, verifier, tok, 3)
    shared = torch.arange(verifier.config.vocab_size)
    dec = spec(big_drafter, verifier, tok, 3, GREEDY, eos_token_ids=[], token_map=shared)
    assert dec.generate(PROMPTS[0], 32).output_ids == _greedy_reference(tiny_pair, 32).output_ids
    with pytest.raises(ValueError, match="token_map holds id"):
        spec(big_drafter, verifier, tok, 3, token_map=torch.arange(verifier.config.vocab_size + 1))


class SubsetDrafter(torch.nn.Module):
    """A drafter whose distribution is exactly zero outside `allowed` (logits -inf there)."""

    def __init__(self, model, allowed: torch.Tensor):
        super().__init__()
        self.model, self.config = model, model.config
        self.register_buffer("mask", torch.full((model.config.vocab_size,), float("-inf")))
        self.mask[allowed] = 0.0

    def forward(self, input_ids, **kwargs):
        out = self.model(input_ids=input_ids, **kwargs)
        out.logits = out.logits + self.mask
        return out


def test_drafter_with_zero_probability_outside_a_subset(tiny_pair):
    drafter, verifier, tok = tiny_pair
    allowed = torch.arange(0, verifier.config.vocab_size, 3)
    masked = SubsetDrafter(drafter, allowed)
    expected = _greedy_reference(tiny_pair, 32).output_ids
    greedy = spec(masked, verifier, tok, 4, GREEDY, eos_token_ids=[])
    assert greedy.generate(PROMPTS[0], 32).output_ids == expected
    for rule in ("sps", "cactus"):
        rec = spec(masked, verifier, tok, 4, rule=rule, eos_token_ids=[]).generate(PROMPTS[0], 40)
        assert rec.num_generated == 40 and rec.accepted_length < 4
        assert any(t % 3 != 0 for t in rec.output_ids)  # recovery reaches outside the subset


def test_bad_arguments_raise_clear_errors(tiny_pair):
    drafter, verifier, tok = tiny_pair
    with pytest.raises(ValueError, match="num_draft_tokens"):
        spec(drafter, verifier, tok, 0)
    with pytest.raises(ValueError, match="acceptance rule"):
        SpeculativeDecoder(drafter, verifier, tok, "sps", num_draft_tokens=2)
    dec = spec(drafter, verifier, tok, 2)
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        dec.generate([], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        dec.generate(PROMPTS[0], 0)
    for bad in (dict(temperature=-1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-2)):
        with pytest.raises(ValueError):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="token_map"):
        spec(drafter, verifier, tok, 2, token_map=torch.tensor([1, 1, 2]))
    with pytest.raises(ValueError, match="device"):
        AutoregressiveDecoder(verifier, tok, device="meta")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_greedy_equivalence_and_bfloat16_sampling():
    drafter, verifier, tok = make_tiny_pair(seed=0)
    drafter, verifier = drafter.to("cuda"), verifier.to("cuda")
    base = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[], device="cuda")
    expected = base.generate(PROMPTS[0], 40).output_ids
    rec = spec(drafter, verifier, tok, 4, GREEDY, eos_token_ids=[], device="cuda")
    assert rec.generate(PROMPTS[0], 40).output_ids == expected
    half = spec(drafter.bfloat16(), verifier.bfloat16(), tok, 4, device="cuda", eos_token_ids=[])
    first, again = (half.generate(PROMPTS[1], 64, seed=3) for _ in range(2))
    assert first.output_ids == again.output_ids and first.num_generated == 64
    check_bookkeeping(first, 4, 64)
