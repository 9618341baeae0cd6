"""The fast forward (static KV cache + compact decoder forward, optionally compiled) against HF's
eager forward: logits at every step of a long generation, roll-back by moving the length, cache
growth, the supported architectures, the drafter's restricted head, and the mode switches."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters as dynamo_counters
from transformers import (
    DynamicCache,
    Gemma2Config,
    Gemma2ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
from cactus_bench.engine.cpu_kernels import resolve_linear_kernel
from cactus_bench.engine.fast_runner import FastRunner, StaticKVCache, unsupported_reason
from cactus_bench.engine.runtime import ModelRunner, crop_cache, make_runner, resolve_compile
from cactus_bench.models.tiny import make_tiny_pair
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")
CPU = torch.device("cpu")
TOLERANCE = 1e-4
# (new tokens, all logits?, tokens rolled back after the forward): prefill is separate; then
# decode, verify m + 1 with partial / full / no acceptance, the drafter's 2-token catch-up, ...
SCHEDULE = [(1, False, 0), (1, False, 0), (5, True, 3), (2, False, 0), (5, True, 0)]
SCHEDULE += [(5, True, 4), (1, False, 0), (3, True, 1), (1, False, 0)] * 3


def qwen2_model(seed: int = 0) -> Qwen2ForCausalLM:
    """A tiny random Qwen2 (q/k/v biases, as in the DeepSeek-R1 distills)."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:  # random init zeroes biases: make them matter
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    return model


def sliding_qwen3(verifier) -> Qwen3ForCausalLM:
    config = verifier.config.to_dict()
    config.update(use_sliding_window=True, sliding_window=6, max_window_layers=1, layer_types=None)
    model = Qwen3ForCausalLM(Qwen3Config(**config)).eval()
    model.load_state_dict(verifier.state_dict())
    return model


def compare_along_schedule(model, fast: FastRunner, prompt_len: int = 12, seed: int = 0) -> float:
    """Drives HF (DynamicCache + crop) and `fast` through SCHEDULE; returns the largest logit
    difference, asserting every step is within TOLERANCE."""
    hf = ModelRunner(model, CPU)
    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (prompt_len,), generator=generator).tolist()
    worst = 0.0
    with torch.inference_mode():
        hf_cache: DynamicCache = hf.prefilled_cache(prompt)
        fast_cache = fast.prefilled_cache(prompt)
        length = len(prompt)
        for num_new, all_logits, rolled_back in SCHEDULE:
            ids = torch.randint(0, vocab, (1, num_new), generator=generator)
            expected = hf.forward(ids, hf_cache, all_logits)
            got = fast.forward(ids, fast_cache, all_logits)
            assert got.shape == expected.shape
            torch.testing.assert_close(got, expected, atol=TOLERANCE, rtol=0)
            finite = expected.isfinite()
            worst = max(worst, float((got - expected)[finite].abs().max()))
            length += num_new - rolled_back
            crop_cache(hf_cache, length)
            crop_cache(fast_cache, length)
            assert fast_cache.get_seq_length() == hf_cache.get_seq_length() == length
    return worst


KERNELS = (
    ["aten", "onednn"]
    if resolve_linear_kernel("auto", CPU, torch.float32) == "onednn"
    else ["aten"]
)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_fast_forward_matches_hf_at_every_step(arch, kernel):
    drafter, verifier, _ = make_tiny_pair(seed=0, arch=arch)
    for model in (verifier, drafter):
        runner = FastRunner(model, CPU, linear_kernel=kernel)
        assert compare_along_schedule(model, runner) < TOLERANCE


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_bf16_fast_forward_is_as_accurate_as_hf_bf16(arch, kernel):
    """bf16 rounds differently along different operation orders, so the fast forward cannot match
    HF's bf16 logits exactly; it must be as close to the fp32 model's logits as HF's bf16 forward
    is (within 2x, plus a quarter of a bf16 unit at the logits' scale), at every step."""
    if kernel == "onednn" and resolve_linear_kernel("auto", CPU, torch.bfloat16) != "onednn":
        pytest.skip("oneDNN cannot pack bfloat16 weights on this CPU (no AVX512-BW/VL/DQ)")
    _, verifier, _ = make_tiny_pair(seed=0, arch=arch)
    half = copy.deepcopy(verifier).bfloat16()
    runners = {
        "fp32": ModelRunner(verifier, CPU),
        "hf_bf16": ModelRunner(half, CPU),
        "fast_bf16": FastRunner(half, CPU, linear_kernel=kernel),
    }
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, verifier.config.vocab_size, (12,), generator=generator).tolist()
    with torch.inference_mode():
        caches = {name: runner.prefilled_cache(prompt) for name, runner in runners.items()}
        length = len(prompt)
        for num_new, all_logits, rolled_back in SCHEDULE:
            ids = torch.randint(0, verifier.config.vocab_size, (1, num_new), generator=generator)
            logits = {n: r.forward(ids, caches[n], all_logits).float() for n, r in runners.items()}
            hf_error = (logits["hf_bf16"] - logits["fp32"]).abs().max()
            fast_error = (logits["fast_bf16"] - logits["fp32"]).abs().max()
            unit = 2.0**-8 * logits["fp32"].abs().max()  # one bf16 unit at the logits' scale
            assert fast_error <= 2 * hf_error + unit / 4, (num_new, fast_error, hf_error)
            length += num_new - rolled_back
            for name in runners:
                crop_cache(caches[name], length)


def test_qwen2_biases_and_sliding_windows(tiny_pair):
    compare_along_schedule(qwen2_model(), FastRunner(qwen2_model(), CPU))
    sliding = sliding_qwen3(tiny_pair[1])
    assert FastRunner(sliding, CPU).windows[1:] == [6, 6]  # layers past max_window_layers slide
    compare_along_schedule(sliding, FastRunner(sliding, CPU), prompt_len=20)


@pytest.mark.parametrize("kernel", KERNELS)
def test_restricted_head_drafter_keeps_minus_infinity(kernel):
    from cactus_bench.models.drafter import build_drafter

    _, verifier, _ = make_tiny_pair(seed=0, arch="llama")
    drafter = build_drafter(verifier, [0, 2], torch.arange(0, verifier.config.vocab_size, 3))
    with torch.no_grad():  # a scaled head with a bias: both must reach the packed product
        drafter.lm_head.bias.normal_(0, 0.5)
    drafter.lm_head.logit_scale = 1.6
    runner = FastRunner(drafter, CPU, linear_kernel=kernel)
    # oneDNN: the SubsetLMHead's product runs on a pack (then its scatter); ATen: the module.
    assert (runner.packs is not None and runner.packs.head is not None) == (kernel == "onednn")
    assert compare_along_schedule(drafter, runner) < TOLERANCE
    with torch.inference_mode():
        logits = runner.forward(torch.tensor([[5]]), runner.prefilled_cache([1, 2]), False)
    assert torch.isinf(logits[0, 0, 1::3]).all() and torch.isfinite(logits[0, 0, ::3]).all()


def test_static_cache_rolls_back_by_moving_its_length(tiny_pair):
    runner = FastRunner(tiny_pair[1], CPU)
    with torch.inference_mode():
        cache = runner.prefilled_cache([1, 2, 3, 4])
        pointers = [key.data_ptr() for key in cache.keys]
        runner.forward(torch.tensor([[5, 6, 7]]), cache, all_logits=True)
        snapshot = [key.clone() for key in cache.keys]
        crop_cache(cache, 5)
    assert cache.get_seq_length() == 5
    assert [key.data_ptr() for key in cache.keys] == pointers  # no copies: the same buffers
    assert all(torch.equal(a, b) for a, b in zip(snapshot, cache.keys, strict=True))
    with pytest.raises(RuntimeError, match="cannot crop"):
        crop_cache(cache, 6)
    assert isinstance(runner.new_cache(), StaticKVCache) and runner.new_cache().capacity >= 256


def test_cache_grows_past_its_capacity(tiny_pair):
    verifier = tiny_pair[1]
    runner, hf = FastRunner(verifier, CPU), ModelRunner(verifier, CPU)
    prompt = list(range(30, 280))  # 250 tokens: the 256-position buffers must grow
    with torch.inference_mode():
        cache, hf_cache = runner.prefilled_cache(prompt), hf.prefilled_cache(prompt)
        assert cache.capacity == 256
        for step in range(4):
            ids = torch.tensor([[40 + step, 41, 42]])
            expected = hf.forward(ids, hf_cache, all_logits=True)
            torch.testing.assert_close(
                runner.forward(ids, cache, True), expected, atol=1e-4, rtol=0
            )
    assert cache.capacity == 512 and cache.get_seq_length() == 262


def test_unsupported_models_fall_back_to_hf_or_fail_clearly(tiny_pair):
    config = Gemma2Config(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    gemma = Gemma2ForCausalLM(config).eval()
    assert "gemma2" in unsupported_reason(gemma)
    assert type(make_runner(gemma, CPU, fast="auto")) is ModelRunner
    assert isinstance(make_runner(tiny_pair[1], CPU, fast="auto"), FastRunner)
    assert type(make_runner(tiny_pair[1], CPU, fast="off")) is ModelRunner
    with pytest.raises(ValueError, match="fast='on' cannot run Gemma2"):
        make_runner(gemma, CPU, fast="on")
    with pytest.raises(ValueError, match="compile='on' needs the fast forward"):
        resolve_compile(gemma, "auto", "on")
    with pytest.raises(ValueError, match="use fast='auto' or 'on'"):
        resolve_compile(tiny_pair[1], "off", "on")
    with pytest.raises(ValueError, match="compile must be one of"):
        AutoregressiveDecoder(tiny_pair[1], tiny_pair[2], compile=True)
    with pytest.raises(ValueError, match="fast must be one of"):
        AutoregressiveDecoder(tiny_pair[1], tiny_pair[2], fast="yes")
    # auto: the tiny models are below the size where compiling pays off; SmolLM2 is above it.
    assert resolve_compile(tiny_pair[1], "auto", "auto") is False
    assert resolve_compile(tiny_pair[1], "auto", "on") is True
    base = AutoregressiveDecoder(gemma, tiny_pair[2], eos_token_ids=[], compile="auto")
    assert type(base.verifier) is ModelRunner
    base.warmup()  # an eager runner has nothing to compile: warmup must pass over it


@pytest.mark.slow
def test_compiled_forward_matches_hf_with_padding(tiny_pair):
    """torch.compile of the layer: 1 and 5 new tokens compiled; 2-4 tokens are padded to 5."""
    verifier = tiny_pair[1]
    runner = FastRunner(verifier, CPU, compile=True, sizes=(1, 5))
    with torch.inference_mode():
        runner.warmup(0)
    assert compare_along_schedule(verifier, runner) < TOLERANCE


@pytest.mark.slow
def test_compiled_decoders_match_the_eager_hf_path(tiny_pair):
    """Greedy: compiled speculative == compiled autoregressive == HF eager autoregressive, and
    the speculative decoder's roll-backs keep it exact over a long generation."""
    drafter, verifier, tok = tiny_pair
    greedy = SamplingParams(temperature=0.0)
    prompt = [72, 101, 108, 108, 111]
    expected = AutoregressiveDecoder(verifier, tok, sampling=greedy, eos_token_ids=[], fast="off")
    expected_ids = expected.generate(prompt, 60).output_ids
    compiled_ar = AutoregressiveDecoder(
        verifier, tok, sampling=greedy, eos_token_ids=[], compile="on"
    )
    spec = SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        make_sampler("sps"),
        4,
        sampling=greedy,
        eos_token_ids=[],
        compile="on",
    )
    assert all(runner.compiled for runner in (*spec.runners(), *compiled_ar.runners()))
    spec.warmup(len(prompt) + 60)
    assert compiled_ar.generate(prompt, 60).output_ids == expected_ids
    # warmup compiled every shape this request uses: generating it traces no new graph.
    graphs_before = dynamo_counters["stats"]["unique_graphs"]
    rec = spec.generate(prompt, 60)
    assert dynamo_counters["stats"]["unique_graphs"] == graphs_before
    assert rec.output_ids == expected_ids and rec.num_steps < 60
    # Sampling with the paper's settings: same seed, same tokens on the compiled path.
    paper = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
    first, again = (spec.generate(prompt, 40, seed=5, sampling=paper) for _ in range(2))
    assert first.output_ids == again.output_ids and first.num_generated == 40
