"""GPU memory for the vLLM engines of a run, worked out from the pair's sizes and the card.

vLLM gives each engine `gpu_memory_utilization` x the card's memory (per GPU), and refuses to
start when that is more than is free; a run with baseline=interleave holds two engines in one
process (speculative: verifier + drafter; baseline: the verifier alone). What an engine needs,
per GPU, with tensor parallelism over `tp` GPUs:

    weights      params x bytes / tp            (the drafter shards like the verifier)
    KV cache     max_model_len x kv_bytes_per_token / tp, for each model of the engine
                 (one request at a time, so one sequence of max_model_len tokens suffices)
    overhead     ENGINE_OVERHEAD_GIB: CUDA context, the activations of vLLM's profiling run
                 and CUDA graphs (an allowance, not a measurement)

`plan_memory` splits the run's share of the card (`backend.gpu_memory_utilization`, 0.85) over
the engines in proportion to their needs, or raises one line before anything loads when the
pair cannot fit. docs/gpu.md works the same arithmetic out for the paper's pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GIB = 1 << 30
ENGINE_OVERHEAD_GIB = 2.0
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelSize:
    """What a decoder-only transformer's config says about its memory."""

    params: int
    kv_elements_per_token: int  # K and V, every layer: 2 x layers x kv_heads x head_dim
    max_positions: int | None  # max_position_embeddings
    dtype: str  # the checkpoint's dtype (config torch_dtype / dtype), for dtype="auto"

    def weight_bytes(self, dtype: str) -> int:
        return self.params * DTYPE_BYTES[self.dtype if dtype == "auto" else dtype]

    def kv_bytes(self, tokens: int, dtype: str) -> int:
        return (
            tokens
            * self.kv_elements_per_token
            * DTYPE_BYTES[self.dtype if dtype == "auto" else dtype]
        )


def model_size(config: Mapping) -> ModelSize:
    """From a config.json mapping (Qwen3, Llama, Gemma-2, SmolLM2 layouts): the parameter count
    of embeddings, attention (q, k, v, o) and gated MLP (3 matrices), within ~1% of the
    checkpoints' (norms and biases are left out)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * config["intermediate_size"]
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return ModelSize(
        params=embeddings + layers * (attention + mlp),
        kv_elements_per_token=2 * layers * kv_heads * head_dim,
        max_positions=config.get("max_position_embeddings"),
        dtype=dtype if dtype in DTYPE_BYTES else "bfloat16",
    )


def engine_need_gib(models: list[ModelSize], *, dtype: str, max_model_len: int, tp: int) -> float:
    """GiB per GPU one engine needs (module docstring)."""
    weights = sum(model.weight_bytes(dtype) for model in models)
    kv = sum(model.kv_bytes(max_model_len, dtype) for model in models)
    return (weights + kv) / tp / GIB + ENGINE_OVERHEAD_GIB


@dataclass(frozen=True)
class MemoryPlan:
    """Each engine's need (GiB per GPU) and the gpu_memory_utilization it is given."""

    card_gib: float
    needs_gib: dict[str, float]
    utilization: dict[str, float]


def plan_memory(
    verifier: ModelSize,
    drafter: ModelSize | None,
    *,
    engines: tuple[str, ...],  # "speculative" and / or "baseline"
    dtype: str,
    max_model_len: int,
    tp: int,
    card_bytes: int,
    share: float,  # the run's share of each card, all engines together
) -> MemoryPlan:
    """The engines' gpu_memory_utilization, or ValueError (one line) when they cannot fit."""
    models = {"speculative": [verifier, *([drafter] if drafter else [])], "baseline": [verifier]}
    needs = {
        name: engine_need_gib(models[name], dtype=dtype, max_model_len=max_model_len, tp=tp)
        for name in engines
    }
    card_gib = card_bytes / GIB
    budget = share * card_gib
    total = sum(needs.values())
    if total > budget:
        parts = " + ".join(f"{name} {gib:.1f}" for name, gib in needs.items())
        raise ValueError(
            f"the pair needs {total:.1f} GiB per GPU ({parts}) at max_model_len {max_model_len} "
            f"on {tp} GPU(s), but {share:g} of a {card_gib:.0f} GiB card is {budget:.1f}: raise "
            "backend.tensor_parallel_size (and the GPUs the job asks for), lower "
            "backend.max_model_len, or run the speculative engine alone (baseline=none)"
        )
    return MemoryPlan(
        card_gib=card_gib,
        needs_gib=needs,
        utilization={name: round(share * need / total, 4) for name, need in needs.items()},
    )
