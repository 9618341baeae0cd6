"""Kernels per decoder layer of the compiled static forward (bench/layer_kernels.py), the CPU
proxy of what a layer costs a GPU in launches: merged products and in-place cache writes."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.bench.layer_kernels import (
    attention_backend,
    cuda_kernels_per_layer,
    inductor_kernels_per_layer,
)
from cactus_bench.models.tiny import make_tiny_pair

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.slow
def test_a_compiled_layer_makes_five_extern_calls_and_copies_no_cache():
    """Merged: 4 GEMMs (q/k/v, o, gate/up, down) and the attention, against 7 + 1 unmerged;
    at most 4 generated kernels (norms, RoPE and writes, SiLU-mul, residual): a scatter_ into
    the cache made inductor copy both caches whole, 6.5 kernels a layer."""
    _, model, _ = make_tiny_pair(seed=0)
    merged = inductor_kernels_per_layer(model, batch=2, num_new=1)
    assert merged["extern"] == 5, merged
    assert merged["generated"] <= 4, merged
    assert merged["kernels"] == merged["extern"] + merged["generated"]
    unmerged = inductor_kernels_per_layer(model, batch=2, num_new=1, merged=False)
    assert unmerged["extern"] == 8, unmerged


def test_the_per_layer_count_needs_two_layers():
    config_model = make_tiny_pair(seed=0)[1]
    config_model.config.num_hidden_layers = 1
    with pytest.raises(ValueError, match="at least 2 layers"):
        inductor_kernels_per_layer(config_model)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without CUDA")
def test_no_profiled_count_without_cuda():
    assert cuda_kernels_per_layer(lambda: None, 3) is None


def test_the_cpu_decode_attention_backend_is_flash(tiny_pair):
    _, verifier, _ = tiny_pair
    assert attention_backend(verifier, batch=8, num_new=4) == "FLASH_ATTENTION"
