"""Kernels per decoder layer of the static forward: what one layer costs a GPU in launches.

A captured forward replays one kernel per launch the compiled or eager code makes, and at batch 1
a small model's forward is launch-bound (the lent H200: 0.6B replay 2.88 ms against a 0.28 ms
weight floor), so the launches per layer are the forward's cost driver there.

- CPU proxy, `inductor_kernels_per_layer`: inductor compiles `BatchRunner.static_forward` (the
  forward a CUDA graph captures) and its wrapper code is read: every call of a generated kernel
  (`cpp_fused_*` on a CPU, `triton_*` on CUDA) and every extern call (`extern_kernels.mm`,
  `torch.ops.aten._scaled_dot_product_*`: GEMMs and attention). Per layer = the difference
  between the model's L layers and its first layer alone, over L - 1, so the embedding, masks
  and head (shared by all layers) are not counted. The GPU path's products are merged (q/k/v and
  gate/up: `FastRunner(merged=True)`); `merged=False` gives the unmerged count for comparison.
- CUDA, `cuda_kernels_per_layer`: the device kernels `torch.profiler` records over one call,
  divided by the layers (the shared part included; None without CUDA).
- `attention_backend`: the SDPA backend torch picks for the static forward's decode attention
  of a model, on its device and dtype (attention.py says which and why).
"""

from __future__ import annotations

import re

import torch

from cactus_bench.engine.attention import sdpa_backend
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.compact_layer import LayerShape
from cactus_bench.engine.fast_runner import FastRunner

# A launch in inductor's wrapper code: a generated kernel's call, or an extern call.
GENERATED_CALL = re.compile(r"^\s+(?:cpp_fused_\w+\(|triton_\w+\.run\()", re.MULTILINE)
EXTERN_CALL = re.compile(r"(?:extern_kernels\.\w+\(|torch\.ops\.aten\.\w+\.\w+\()")


def inductor_kernels_per_layer(
    model: torch.nn.Module, batch: int = 1, num_new: int = 1, merged: bool = True
) -> dict[str, float]:
    """{"generated", "extern", "kernels"} per decoder layer of the compiled static forward over
    `batch` rows of `num_new` tokens (module docstring); compiles twice (tens of seconds)."""
    layers = model.config.num_hidden_layers
    if layers < 2:
        raise ValueError("the per-layer difference needs a model of at least 2 layers")
    whole = _wrapper_counts(model, batch, num_new, merged, layers)
    first = _wrapper_counts(model, batch, num_new, merged, 1)
    per_layer = {key: (whole[key] - first[key]) / (layers - 1) for key in whole}
    per_layer["kernels"] = per_layer["generated"] + per_layer["extern"]
    return per_layer


def _wrapper_counts(model, batch: int, num_new: int, merged: bool, layers: int) -> dict:
    """Launches in the wrapper code of the static forward over the first `layers` layers."""
    import torch._inductor.config as inductor_config  # lazy: the compiler, for this count only
    from torch._inductor.utils import run_and_get_code  # lazy: as above

    device = next(model.parameters()).device
    single = FastRunner(model, device, linear_kernel="aten", merged=merged)
    single.layers, single.windows = single.layers[:layers], single.windows[:layers]
    runner = BatchRunner(single)
    cache = runner.new_cache(batch, 64)
    ids = torch.zeros((batch, num_new), dtype=torch.long, device=device)
    counts = torch.full((batch,), num_new, dtype=torch.long, device=device)
    torch._dynamo.reset()
    compiled = torch.compile(runner.static_forward, fullgraph=True, dynamic=False)
    saved = inductor_config.fx_graph_cache
    inductor_config.fx_graph_cache = False  # a cached graph would skip the code generation
    try:
        with torch.inference_mode():
            _, codes = run_and_get_code(compiled, ids, counts, cache, num_new > 1)
    finally:
        inductor_config.fx_graph_cache = saved
        torch._dynamo.reset()
    body = "".join(code[code.index("def call(") :] for code in codes)
    return {
        "generated": len(GENERATED_CALL.findall(body)),
        "extern": len(EXTERN_CALL.findall(body)),
    }


def cuda_kernels_per_layer(call, layers: int) -> float | None:
    """Device kernels `torch.profiler` records over one `call()` (run once before, to warm up),
    per decoder layer; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    from torch.profiler import ProfilerActivity, profile  # lazy: CUDA only

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        call()
        torch.cuda.synchronize()
    kernels = sum(
        event.count
        for event in profiler.key_averages()
        if event.device_type == torch.autograd.DeviceType.CUDA
    )
    return kernels / layers


def attention_backend(model: torch.nn.Module, batch: int = 1, num_new: int = 1, capacity=4096):
    """The SDPA backend of the static forward's attention for `model` (its device and dtype):
    queries [B, H_q, n, D] over [B, H_kv, capacity, D] caches with an additive mask, as
    `BatchRunner.static_forward` calls it."""
    shape = LayerShape.of(model)
    weight = model.model.embed_tokens.weight
    like = {"dtype": weight.dtype, "device": weight.device}
    query = torch.zeros((batch, shape.num_q_heads, num_new, shape.head_dim), **like)
    cache = torch.zeros((batch, shape.num_kv_heads, capacity, shape.head_dim), **like)
    mask = torch.zeros((batch, 1, num_new, capacity), **like)
    return sdpa_backend(query, cache, cache, mask)
