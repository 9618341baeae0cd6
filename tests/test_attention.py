"""The fast forward's attention block (engine/attention.py) and its merged products
(packed_model.merged_layers): which SDPA backend serves the decode attention, and q/k/v and
gate/up merged into one product each, with HF's logits and no copy of the weights."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import Qwen2Config, Qwen2ForCausalLM

from cactus_bench.bench.op_count import count_ops
from cactus_bench.engine import attention as attention_module
from cactus_bench.engine.attention import sdpa_backend
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.runtime import ModelRunner, crop_cache
from cactus_bench.models.tiny import make_tiny_pair

pytestmark = pytest.mark.usefixtures("single_thread")
CPU = torch.device("cpu")
PROMPT = [5, 9, 2, 7, 3, 8]
# (new tokens, all logits?, tokens rolled back): decode, a verify with roll-back, catch-up
SCHEDULE = [(1, False, 0), (5, True, 3), (2, False, 0), (1, False, 0), (4, True, 0)]
LINEAR_OPS = ("aten.mm.default", "aten.addmm.default", "aten.linear.default")


def _backends_seen(monkeypatch) -> list[str]:
    """Records `sdpa_backend` of every decode attention call from now on."""
    seen = []
    original = attention_module.decode_attention

    def recording(query, key_cache, value_cache, mask, scale):
        seen.append(sdpa_backend(query, key_cache, value_cache, mask))
        return original(query, key_cache, value_cache, mask, scale)

    monkeypatch.setattr(attention_module, "decode_attention", recording)
    return seen


def _drive(runner, vocab: int, seed: int = 0) -> list[torch.Tensor]:
    """Logits of a prefill + SCHEDULE through a single-row runner (FastRunner or HF's)."""
    generator = torch.Generator().manual_seed(seed)
    outputs = []
    with torch.inference_mode():
        cache = runner.prefilled_cache(PROMPT)
        length = len(PROMPT)
        for num_new, all_logits, rolled_back in SCHEDULE:
            ids = torch.randint(0, vocab, (1, num_new), generator=generator)
            outputs.append(runner.forward(ids, cache, all_logits))
            length += num_new - rolled_back
            crop_cache(cache, length)
    return outputs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_decode_attention_runs_on_the_fused_flash_kernel(tiny_pair, monkeypatch, dtype):
    """torch picks its CPU flash kernel for the masked GQA attention of batch 1 and batch B,
    and the forwards run (and give the same logits) with every other backend disabled."""
    _, verifier, _ = tiny_pair
    model = make_tiny_pair(seed=0)[1].to(dtype) if dtype != torch.float32 else verifier
    seen = _backends_seen(monkeypatch)
    single = FastRunner(model, CPU, linear_kernel="aten")
    default = _drive(single, model.config.vocab_size)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        flash_only = _drive(single, model.config.vocab_size)
    for got, expected in zip(flash_only, default, strict=True):
        torch.testing.assert_close(got, expected, atol=0, rtol=0)
    batched = BatchRunner(single)
    cache = batched.new_cache(2, 64)
    ids, counts = torch.tensor([[11, 12], [13, 0]]), torch.tensor([2, 1])
    with torch.inference_mode(), sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        batched.prefill(cache, 0, PROMPT)
        batched.static_forward(ids, counts, cache, all_logits=True)
    assert seen and set(seen) == {"FLASH_ATTENTION"}, sorted(set(seen))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_decode_attention_takes_a_fused_backend(monkeypatch):
    """On CUDA the masked GQA decode attention must not fall to math (repeated, upcast K/V)."""
    model = make_tiny_pair(seed=0)[1].to("cuda", torch.bfloat16)
    seen = _backends_seen(monkeypatch)
    _drive(FastRunner(model, torch.device("cuda")), model.config.vocab_size)
    assert seen and set(seen) <= {"CUDNN_ATTENTION", "EFFICIENT_ATTENTION"}, sorted(set(seen))


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_merged_products_give_hf_logits_without_copies(arch):
    _, model, _ = make_tiny_pair(seed=0, arch=arch)
    expected = _drive(ModelRunner(model, CPU), model.config.vocab_size)
    runner = FastRunner(model, CPU, linear_kernel="aten", merged=True)
    for got, want in zip(_drive(runner, model.config.vocab_size), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
    merged = runner.layer_products(packed=False)[0]
    attn = model.model.layers[0].self_attn
    storage = merged.qkv.weight.untyped_storage().data_ptr()
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):  # views of the merged weight
        assert proj.weight.untyped_storage().data_ptr() == storage
    # 4 products a layer (q/k/v, o, gate/up, down) + the head, against 7 + 1 unmerged
    ids = torch.tensor([[3, 4]])
    layers = model.config.num_hidden_layers
    for fast, products in ((runner, 4), (FastRunner(model, CPU, linear_kernel="aten"), 7)):
        with torch.inference_mode():
            cache = fast.prefilled_cache(PROMPT)
            counter, _ = count_ops(fast.forward, ids, cache, True)
        assert sum(counter.by_op[op] for op in LINEAR_OPS) == products * layers + 1


def test_merged_products_keep_qwen2_biases():
    """q/k/v biases (Qwen2) merge with their weights; zeroed by random init, so made to matter."""
    torch.manual_seed(0)
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
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.5)
    expected = _drive(ModelRunner(model, CPU), config.vocab_size)
    runner = FastRunner(model, CPU, linear_kernel="aten", merged=True)
    assert runner.layer_products(packed=False)[0].qkv.bias is not None
    for got, want in zip(_drive(runner, config.vocab_size), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_a_replaced_weight_is_merged_again():
    """A parameter replaced after the merge (not a view any more) is seen: stale merged
    weights would give other logits than HF's."""
    _, model, _ = make_tiny_pair(seed=1)
    runner = FastRunner(model, CPU, linear_kernel="aten", merged=True)
    before = runner.layer_products(packed=False)[1]
    k_proj = model.model.layers[1].self_attn.k_proj
    with torch.no_grad():
        k_proj.weight = torch.nn.Parameter(k_proj.weight * 3)
    expected = _drive(ModelRunner(model, CPU), model.config.vocab_size)
    got = _drive(runner, model.config.vocab_size)  # prefilled_cache refreshes the merge
    assert runner.layer_products(packed=False)[1] is not before
    for one, other in zip(got, expected, strict=True):
        torch.testing.assert_close(one, other, atol=1e-4, rtol=0)
