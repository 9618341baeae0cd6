"""What one drafter forward runs on the device: kernels per layer and the attention backend.

`forward_profile` runs `torch.profiler` over one batch-1, one-token forward of the batched
engine's static forward, eager and (on CUDA) replayed as a CUDA graph:
- eager: the aten ops it dispatches, which name the SDPA backend that served attention
  (`aten::_scaled_dot_product_{flash,efficient,cudnn}_attention`, or the math fallback, which
  repeats K/V and upcasts them over the whole capacity);
- replay: the device kernels of one graph launch, and their count per decoder layer (embedding
  and head kernels included, so a little over a layer's own), with the most frequent names
  (where the profiler sees none inside the launch, it says so rather than report 0).
On a CPU (the dry run) there are no kernels: only the eager ops and the backend.
"""

from __future__ import annotations

from collections import Counter

import torch

from cactus_bench.bench.gpu_costs import at_context, release
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.cuda_graphs import GraphedRunner
from cactus_bench.engine.fast_runner import FastRunner

# Backend -> fragments of its aten op or kernel names (checked in this order).
ATTENTION_NAMES = {
    "flash (CPU kernel)": ("_flash_attention_for_cpu",),
    "cudnn": ("_cudnn_attention", "cudnn_sdpa", "cudnn_fmha"),
    "flash": ("_flash_attention", "flash_fwd", "pytorch_flash"),
    "efficient": ("_efficient_attention", "fmha_cutlass", "cutlassf", "mem_eff"),
    "math": ("_scaled_dot_product_attention_math",),
}


def attention_backend(names) -> str:
    """The SDPA backend named by aten op or kernel names; "math" where only its fallback
    (or a bare softmax between matrix products) shows; "unknown" where nothing does."""
    lowered = [name.lower() for name in names]
    for backend, fragments in ATTENTION_NAMES.items():
        if any(fragment in name for name in lowered for fragment in fragments):
            return backend
    return "math (softmax kernel)" if any("softmax" in name for name in lowered) else "unknown"


def profiled(call, device: torch.device) -> list:
    """The profiler's events of one call (after a warm-up call)."""
    from torch.profiler import ProfilerActivity, profile  # lazy: slow to import

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    call()
    with profile(activities=activities) as prof:
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
    return list(prof.events())


def kernel_names(events) -> list[str]:
    return [e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA]


def forward_profile(model, device: torch.device, context: int, graphs: bool) -> dict:
    """Kernels per layer and the attention backend of one batch-1, one-token forward at
    `context` cached tokens (module doc)."""
    runner = BatchRunner(FastRunner(model, device, linear_kernel="aten"))
    layers = model.config.num_hidden_layers
    graphed = GraphedRunner(runner) if graphs else None
    cache = runner.new_cache(1, context + 2, keep=graphed is not None)
    cache.lengths.fill_(context)
    ids = torch.randint(model.config.vocab_size, (1, 1), device=device)
    inputs = (ids, torch.ones(1, dtype=torch.long, device=device), cache, False)
    with torch.inference_mode():
        eager = profiled(at_context(runner.static_forward, inputs, context), device)
        ops = [e.name for e in eager if e.name.startswith("aten::")]
        eager_kernels = len(kernel_names(eager))
        out = {
            "layers": layers,
            "context": context,
            "eager_aten_ops": len(ops),
            "eager_kernels": eager_kernels,
            "eager_kernels_per_layer": round(eager_kernels / layers, 1) if eager_kernels else None,
            "attention_backend": attention_backend(ops + kernel_names(eager)),
            "attention_ops": sorted({name for name in ops if "attention" in name}),
        }
        if graphed is not None:
            graphed.capture(cache, [(1, False)])
            if graphed.failed is not None:
                return {**out, "replay": f"capture failed: {graphed.failed}"}
            kernels = kernel_names(profiled(at_context(graphed.forward, inputs, context), device))
            if not kernels:  # this profiler does not trace inside a graph launch: say so
                return {**out, "replay": "the profiler saw no kernel inside the graph launch"}
            out.update(
                replay_kernels=len(kernels),
                replay_kernels_per_layer=round(len(kernels) / layers, 1),
                replay_attention_backend=attention_backend(kernels),
                replay_top_kernels=[f"{n} x{c}" for n, c in Counter(kernels).most_common(8)],
            )
    del graphed, cache
    release(device)
    return out
