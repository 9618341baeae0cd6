"""CPU kernel choices: what dtype=auto resolves to (by capability), which linear kernel runs, and
the oneDNN packs (fused products equal to HF's modules; shared per model; re-packed on edits)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from cactus_bench.engine import cpu_kernels, runtime
from cactus_bench.engine import packed_model as packed_model_module
from cactus_bench.engine.cpu_kernels import (
    PackedLinear,
    kernel_label,
    resolve_linear_kernel,
)
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.packed_model import packed_model
from cactus_bench.models.loading import load_pair, resolve_dtype, resolve_pair_dtype

pytestmark = pytest.mark.usefixtures("single_thread")
CPU = torch.device("cpu")
X86_ONEDNN = cpu_kernels.cpu_info().x86 and cpu_kernels.cpu_info().onednn
needs_onednn = pytest.mark.skipif(not X86_ONEDNN, reason="needs an x86 CPU and torch's oneDNN")
ONEDNN_BF16 = X86_ONEDNN and cpu_kernels.cpu_info().onednn_bf16
needs_onednn_bf16 = pytest.mark.skipif(
    not ONEDNN_BF16, reason="oneDNN runs no bf16 products on this CPU (no AVX512-BW/VL/DQ)"
)


def fake_cpu(monkeypatch, flags: set[str], onednn: bool = True) -> None:
    info = dataclasses.replace(
        cpu_kernels.cpu_info(), flags=frozenset(flags), onednn=onednn, onednn_bf16=onednn
    )
    monkeypatch.setattr(cpu_kernels, "cpu_info", lambda: info)


def test_cpu_info_names_the_cpu_and_its_instruction_set():
    info = cpu_kernels.cpu_info()
    assert info.model and info.capability in info.isa
    assert isinstance(info.native_bf16, bool)


@needs_onednn
def test_auto_dtype_is_bf16_only_with_hardware_bf16(monkeypatch):
    for flags, onednn, expected in (
        ({"avx2", "avx512f", "avx512_bf16"}, True, torch.bfloat16),
        ({"avx2", "amx_bf16", "amx_tile"}, True, torch.bfloat16),
        ({"avx2", "avx512f"}, True, torch.float32),  # oneDNN would emulate bf16: no gain
        ({"avx2", "avx512_bf16"}, False, torch.float32),  # torch without oneDNN
    ):
        fake_cpu(monkeypatch, flags, onednn)
        assert cpu_kernels.cpu_info().native_bf16 is (expected == torch.bfloat16)
        assert cpu_kernels.auto_cpu_dtype() == expected
        assert resolve_dtype("auto", CPU, cpu_bf16=True) == expected
        assert resolve_dtype("auto", CPU) == torch.float32  # hub and tiny pairs keep fp32
        assert resolve_dtype("float32", CPU, cpu_bf16=True) == torch.float32  # still selectable
        assert resolve_pair_dtype("smollm2_135m", "cpu") == expected  # its YAML says auto
        assert resolve_pair_dtype("smollm2_135m", "cpu", "float32") == torch.float32
        assert resolve_pair_dtype("qwen3_8b", "cpu", "auto") == torch.float32


def test_loaded_pair_records_the_resolved_dtype():
    pair = load_pair("tiny_random", device="cpu", dtype="auto")
    assert pair.dtype == "float32"
    pair = load_pair("tiny_random", device="cpu", dtype="bfloat16")
    assert pair.dtype == "bfloat16"
    assert next(pair.drafter.parameters()).dtype == torch.bfloat16  # both models, one dtype


def test_linear_kernel_resolution_and_errors(monkeypatch):
    with pytest.raises(ValueError, match="linear kernel must be one of"):
        resolve_linear_kernel("mkl", CPU, torch.float32)
    assert resolve_linear_kernel("aten", CPU, torch.float32) == "aten"
    assert resolve_linear_kernel("auto", torch.device("cuda"), torch.bfloat16) == "aten"
    assert resolve_linear_kernel("auto", CPU, torch.float16) == "aten"
    with pytest.raises(ValueError, match="float16.*use 'auto' or 'aten'"):
        resolve_linear_kernel("onednn", CPU, torch.float16)
    fake_cpu(monkeypatch, set(), onednn=False)
    assert resolve_linear_kernel("auto", CPU, torch.float32) == "aten"
    with pytest.raises(ValueError, match="no usable oneDNN"):
        resolve_linear_kernel("onednn", CPU, torch.float32)


@needs_onednn
@pytest.mark.parametrize(
    "dtype", [torch.float32, pytest.param(torch.bfloat16, marks=needs_onednn_bf16)]
)
def test_packed_linear_matches_f_linear_fused_and_with_biases(dtype):
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(size, 48, generator=generator).to(dtype) for size in (32, 16, 16)]
    biases = [torch.randn(32, generator=generator).to(dtype), None, None]  # zeros where absent
    packed = PackedLinear(weights, biases)
    assert resolve_linear_kernel("auto", CPU, dtype) == "onednn"
    for rows in range(1, 9):
        x = torch.randn(1, rows, 48, generator=generator).to(dtype)
        got = packed(x)  # [1, rows, 64]
        expected = torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases, strict=True)], -1)
        exact = torch.cat(
            [
                F.linear(x.double(), w.double(), None if b is None else b.double())
                for w, b in zip(weights, biases, strict=True)
            ],
            -1,
        )
        assert got.shape == (1, rows, 64) and got.dtype == dtype
        # Both round the same fp32 sums: fp32 to ~1e-5, bf16 to a few units in the last place.
        scale = exact.abs().max()
        tolerance = 1e-5 if dtype == torch.float32 else 2**-6
        assert (got.double() - exact).abs().max() <= tolerance * scale
        assert (got.double() - expected.double()).abs().max() <= tolerance * scale


def test_choice_of_packed_rows_needs_a_clear_win():
    aten = {1: 1.0, 2: 1.0, 3: 1.0, 4: 2.0}
    packed = {1: 1.1, 2: 0.95, 3: 0.9, 4: 1.0}  # 2: within the margin, ATen stays
    assert cpu_kernels.choose_packed_rows(aten, packed) == {3, 4}


@needs_onednn
def test_runner_picks_packs_by_dtype_and_row_count(tiny_pair, monkeypatch):
    verifier = tiny_pair[1]
    runner = FastRunner(verifier, CPU)
    assert runner.linear_kernel == "onednn"
    # fp32 weights this small are not timed: ATen for every row count (prefills too).
    assert runner.packs.faster_rows == frozenset()
    assert not any(runner.uses_packs(n) for n in (1, 2, 8, 9, 600))
    assert all(FastRunner(verifier, CPU, linear_kernel="onednn").uses_packs(n) for n in (1, 3))
    half = copy.deepcopy(verifier).bfloat16()
    if ONEDNN_BF16:  # bf16 always on the packs where oneDNN can run them, else never
        assert all(FastRunner(half, CPU).uses_packs(n) for n in (1, 3))
    else:
        assert not any(FastRunner(half, CPU).uses_packs(n) for n in (1, 3))
        with pytest.raises(ValueError, match="cannot pack bfloat16"):
            FastRunner(half, CPU, linear_kernel="onednn")
    assert not FastRunner(verifier, CPU, linear_kernel="aten").uses_packs(9)
    assert FastRunner(verifier, CPU, linear_kernel="onednn").uses_packs(600)
    # Larger ones are timed once per model; the choice is a subset of 1..8 (timings vary).
    monkeypatch.setattr(packed_model_module, "PROBE_MIN_BYTES", 0)
    measured = FastRunner(copy.deepcopy(verifier), CPU).packs.faster_rows
    assert measured <= set(cpu_kernels.PROBE_ROWS)
    assert FastRunner(verifier, CPU, compile=True).linear_kernel == "aten"  # inductor: modules
    with pytest.raises(ValueError, match="compiled layers trace HF's modules"):
        FastRunner(verifier, CPU, compile=True, linear_kernel="onednn")
    assert "onednn packed" in kernel_label("onednn", torch.float32, 3)
    assert kernel_label("aten", torch.float32, 1).startswith("aten")


@needs_onednn
def test_packs_are_shared_per_model_and_rebuilt_after_edits(tiny_pair, monkeypatch):
    verifier = copy.deepcopy(tiny_pair[1])
    first, second = (FastRunner(verifier, CPU, linear_kernel="onednn") for _ in range(2))
    assert first.packs is second.packs is packed_model(verifier)  # one packed copy per model
    prompt, ids = [5, 6, 7, 8], torch.tensor([[9, 10, 11]])
    with torch.inference_mode():
        before = first.forward(ids, first.prefilled_cache(prompt), all_logits=True)
    with torch.no_grad():
        verifier.model.layers[0].mlp.down_proj.weight.mul_(3.0)  # edited in place
    hf = runtime.ModelRunner(verifier, CPU)
    with torch.inference_mode():
        after = first.forward(ids, first.prefilled_cache(prompt), all_logits=True)
        expected = hf.forward(ids, hf.prefilled_cache(prompt), all_logits=True)
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, expected, atol=1e-4, rtol=0)
    monkeypatch.setattr(runtime, "DEFAULT_LINEAR_KERNEL", "aten")
    assert runtime.make_runner(verifier, CPU).linear_kernel == "aten"


@needs_onednn
def test_bench_draw_times_the_draw_and_both_heads_per_dtype():
    """cactus_bench.bench.draw (scripts/bench_draw.py) on tiny drafters with a SubsetLMHead
    (one verifier per dtype: the drafter shares its embedding)."""
    from cactus_bench.bench.draw import bench_draw
    from cactus_bench.models.drafter import build_drafter
    from cactus_bench.models.tiny import make_tiny_pair

    drafters = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        verifier = make_tiny_pair(seed=0, arch="llama")[1].to(dtype)
        subset = torch.arange(0, verifier.config.vocab_size, 3)
        drafters[name] = build_drafter(verifier, [0], subset)
    results = bench_draw(drafters, repeats=8)
    expected = {("draw", "float32", "torch.multinomial"), ("draw", "float32", "sample_token")}
    expected |= {("head", d, "module") for d in drafters}
    expected |= {("head", "float32", "packed")}
    if ONEDNN_BF16:  # bf16 packs only where oneDNN runs bf16 products
        expected.add(("head", "bfloat16", "packed"))
    assert set(results) == expected
    for median, q25, q75 in results.values():
        assert 0 <= q25 <= median <= q75
