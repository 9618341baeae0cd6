"""The restricted-head drafter: head semantics, building, caching, save/load, engine use."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import DynamicCache

from cactus_bench.engine import SamplingParams, SpeculativeDecoder, process_logits
from cactus_bench.models import make_tiny_pair
from cactus_bench.models.drafter import (
    SMOLLM2_DRAFTER_CONFIG,
    SMOLLM2_DRAFTER_WEIGHTS,
    SubsetLMHead,
    build_drafter,
    load_drafter,
    save_drafter,
)
from cactus_bench.models.smollm2 import is_prepared
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")
SAMPLING = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)


@pytest.fixture(scope="module")
def llama_pair():
    return make_tiny_pair(seed=3, arch="llama")


@pytest.fixture(scope="module")
def subset(llama_pair):
    vocab = llama_pair[1].config.vocab_size
    return torch.arange(0, vocab, 3)  # every third id: most ids are outside


def test_subset_head_returns_full_vocab_logits_and_zero_probability_outside():
    torch.manual_seed(0)
    weight, ids = torch.randn(4, 8), torch.tensor([1, 5, 6, 9])
    head = SubsetLMHead(weight, ids, vocab_size=12)
    hidden = torch.randn(2, 3, 8)
    full = head(hidden)  # [2, 3, 12]
    assert full.shape == (2, 3, 12)
    outside = torch.ones(12, dtype=torch.bool)
    outside[ids] = False
    assert torch.isneginf(full[..., outside]).all()
    assert torch.allclose(full[..., ids], hidden @ weight.T)
    probs = process_logits(full, SAMPLING)
    assert (probs[..., outside] == 0).all() and torch.allclose(probs.sum(-1), torch.ones(2, 3))
    assert not hasattr(head, "weight")  # engine reads the vocab size from config instead
    with pytest.raises(ValueError, match="token ids must lie"):
        SubsetLMHead(weight, torch.tensor([1, 5, 6, 12]), vocab_size=12)
    with pytest.raises(ValueError, match="needs weight"):
        SubsetLMHead(weight, ids[:3], vocab_size=12)


def test_logit_scale_sharpens_the_subset_logits_only():
    torch.manual_seed(0)
    weight, ids = torch.randn(4, 8), torch.tensor([1, 5, 6, 9])
    head = SubsetLMHead(weight, ids, vocab_size=12, logit_scale=1.5)
    hidden = torch.randn(2, 3, 8)
    full = head(hidden)
    assert torch.allclose(full[..., ids], 1.5 * (hidden @ weight.T))
    assert torch.isneginf(full).sum() == 2 * 3 * (12 - 4)
    assert torch.allclose(head.subset_logits(hidden), hidden @ weight.T)  # training: unscaled
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="logit_scale must be a positive number"):
            SubsetLMHead(weight, ids, vocab_size=12, logit_scale=bad)


def test_build_shares_embeddings_and_copies_the_chosen_layers(llama_pair, subset):
    _, verifier, _ = llama_pair
    drafter = build_drafter(verifier, [0, 2], subset)
    assert drafter.model.embed_tokens is verifier.model.embed_tokens
    assert drafter.config.num_hidden_layers == 2
    source = verifier.model.layers[2].mlp.down_proj.weight
    copy = drafter.model.layers[1].mlp.down_proj.weight
    assert torch.equal(copy, source) and copy.data_ptr() != source.data_ptr()
    with pytest.raises(ValueError, match="init_layers"):
        build_drafter(verifier, [0, 7], subset)


def test_cached_decoding_and_crop_match_a_full_forward(llama_pair, subset):
    _, verifier, _ = llama_pair
    drafter = build_drafter(verifier, [0, 1], subset)
    ids = torch.tensor([[3, 14, 15, 92, 65, 35, 89]])
    with torch.no_grad():
        full = drafter(input_ids=ids).logits  # [1, 7, V]
        cache = DynamicCache()
        drafter(input_ids=ids[:, :4], cache=cache, use_cache=True)
        steps = [
            drafter(input_ids=ids[:, i : i + 1], cache=cache, use_cache=True).logits
            for i in range(4, 7)
        ]
        cache.crop(-2)  # roll back two tokens (7 -> 5), as the engine does after a rejection
        again = drafter(input_ids=ids[:, 5:7], cache=cache, use_cache=True).logits
    finite = torch.isfinite(full[0, 4])
    assert finite.sum() == len(subset)
    for offset, step in enumerate(steps):
        assert torch.allclose(step[0, -1][finite], full[0, 4 + offset][finite], atol=1e-5)
    assert torch.allclose(again[0][:, finite], full[0, 5:7][:, finite], atol=1e-5)


def test_save_and_load_round_trip_only_the_new_parameters(tmp_path, llama_pair, subset):
    _, verifier, _ = llama_pair
    drafter = build_drafter(verifier, [1, 2], subset)
    with torch.no_grad():
        drafter.lm_head.bias.normal_()
        drafter.model.norm.weight.mul_(1.5)
    weights, config = tmp_path / "d.safetensors", tmp_path / "d.json"
    save_drafter(drafter, weights, config, {"note": "test"})
    assert json.loads(config.read_text())["subset_size"] == len(subset)
    loaded = load_drafter(verifier, weights, config)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        expected, got = drafter(input_ids=ids).logits, loaded(input_ids=ids).logits
    finite = torch.isfinite(expected)
    assert torch.equal(finite, torch.isfinite(got))
    assert torch.allclose(got[finite], expected[finite], atol=2e-2, rtol=1e-2)  # stored fp16
    assert loaded.lm_head.logit_scale == 1.0
    meta = json.loads(config.read_text())
    config.write_text(json.dumps({**meta, "logit_scale": 2.0}))
    with torch.no_grad():
        sharpened = load_drafter(verifier, weights, config)(input_ids=ids).logits
    assert torch.allclose(sharpened[finite], 2 * got[finite], rtol=1e-5, atol=1e-5)
    config.write_text(json.dumps({k: v for k, v in meta.items() if k != "logit_scale"}))
    assert load_drafter(verifier, weights, config).lm_head.logit_scale == 1.0  # older configs
    config.write_text(json.dumps({**meta, "logit_scale": -1}))
    with pytest.raises(ValueError, match="logit_scale must be a positive number"):
        load_drafter(verifier, weights, config)
    config.write_text(json.dumps(meta))
    other_vocab = make_tiny_pair(seed=3, arch="llama", vocab_size=verifier.config.vocab_size + 5)
    with pytest.raises(ValueError, match="was trained for vocab"):
        load_drafter(other_vocab[1], weights, config)
    with pytest.raises(FileNotFoundError, match="make drafter"):
        load_drafter(verifier, tmp_path / "none.safetensors", config)


def test_engine_drives_the_restricted_drafter(llama_pair, subset):
    _, verifier, tokenizer = llama_pair
    drafter = build_drafter(verifier, [0], subset)
    decoder = SpeculativeDecoder(
        drafter, verifier, tokenizer, make_sampler("sps"), num_draft_tokens=3, sampling=SAMPLING
    )
    record = decoder.generate([1, 2, 3, 4], max_new_tokens=12, seed=0)
    assert 0 < record.num_generated <= 12
    assert all(
        0 <= a <= d for a, d in zip(record.accepted_per_step, record.drafted_per_step, strict=True)
    )


smollm2_ready = pytest.mark.skipif(
    not (is_prepared() and SMOLLM2_DRAFTER_WEIGHTS.exists() and SMOLLM2_DRAFTER_CONFIG.exists()),
    reason="SmolLM2 cache (scripts/prepare_smollm2.py) or committed drafter weights absent",
)


@smollm2_ready
def test_committed_smollm2_drafter_gives_full_vocab_logits_with_the_mask():
    from cactus_bench.models import load_pair

    pair = load_pair("smollm2_135m", device="cpu")
    config = json.loads(SMOLLM2_DRAFTER_CONFIG.read_text())
    assert pair.token_map is None
    assert pair.drafter.model.embed_tokens is pair.verifier.model.embed_tokens
    assert SMOLLM2_DRAFTER_WEIGHTS.stat().st_size <= 25e6  # the committed weights' budget
    text = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12 times 7?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    ids = torch.tensor([pair.tokenizer(text, add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        logits = pair.drafter(input_ids=ids).logits  # [1, T, 49152]
    assert logits.shape == (1, ids.shape[1], 49152)
    assert (torch.isfinite(logits).sum(-1) == config["subset_size"]).all()
    assert pair.drafter.lm_head.logit_scale == config["logit_scale"] > 1  # the calibrated head
    probs = process_logits(logits[0, -1], SAMPLING)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert (probs[~torch.isfinite(logits[0, -1])] == 0).all()


def test_eval_drafter_interval_resamples_answers_not_tokens():
    """eval_drafter's acceptance interval: a bootstrap over answers (tokens of one answer are
    correlated), pooled as sum / tokens; equal answers give a zero-width interval."""
    from cactus_bench.store.bootstrap import per_token_summary as acceptance_summary

    same = acceptance_summary([[0.5, 0.5], [0.5, 0.5, 0.5]], seed=0)
    assert same["mean"] == 0.5 and same["ci95"] == [0.5, 0.5]
    assert (same["tokens"], same["answers"]) == (5, 2)
    mixed = acceptance_summary([[0.2] * 50, [0.9] * 10, [0.6] * 40], seed=0)
    assert mixed["mean"] == pytest.approx((10 + 9 + 24) / 100)
    low, high = mixed["ci95"]
    assert 0.19 < low < mixed["mean"] < high < 0.91  # wide: three answers, not 100 tokens
    assert high - low > 0.2
    assert acceptance_summary([[0.2] * 50, [0.9] * 10, [0.6] * 40], seed=0) == mixed  # seeded
