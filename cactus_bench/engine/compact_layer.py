"""One Llama/Qwen decoder layer over a static KV cache, in as few operations as HF's math allows.

A batch-1 step runs each layer's ~40 small operations 30 times (SmolLM2); at a few microseconds
of dispatch each, that is several milliseconds a step on a CPU, so the layer keeps HF's numerics
but not its operation count:
- RMSNorm: `F.rms_norm` (float32 inside), then HF's weight product in the input dtype (2
  operations instead of 8; the same bits as HF's module in fp32 and bf16 where measured).
- q, k and v come out of one product, and the MLP's gate and up out of one (oneDNN packs on a
  CPU, merged weights on a GPU: packed_model.py); RoPE, the cache writes and GQA attention
  without copies are the attention block's (attention.py), shared with the batched forward.

Supported: Llama, Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm) causal LMs. Other architectures
(Gemma 2: scaled embeddings, soft-capping, extra norms) run HF's own forward;
`unsupported_reason(model)` says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_bench.engine.attention import attention, norm

# Mistral is left out on purpose: its sliding window applies to every layer without layer_types.
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """None when the compact forward reproduces `model`, else a one-line reason it cannot."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {model_type!r} is not one of {SUPPORTED_MODEL_TYPES}"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in STATIC_ROPE_TYPES:
        return f"rope_type {rope_type!r} depends on the sequence length"
    if getattr(config, "final_logit_softcapping", None) or getattr(
        config, "attn_logit_softcapping", None
    ):
        return "logit soft-capping is not implemented in the compact forward"
    inner = getattr(model, "model", None)
    if not all(hasattr(inner, name) for name in ("embed_tokens", "layers", "norm", "rotary_emb")):
        return f"{type(model).__name__} lacks the usual .model.embed_tokens/layers/norm/rotary_emb"
    return None


@dataclass(frozen=True)
class LayerShape:
    """The constants of a model's layers (torch.compile specialises on them)."""

    head_dim: int
    num_q_heads: int
    num_kv_heads: int
    scaling: float
    has_qk_norm: bool  # Qwen3: RMSNorm over each q and k head before RoPE
    standard_norms: bool  # every norm is HF's RMSNorm (weight, variance_epsilon)

    @classmethod
    def of(cls, model: torch.nn.Module) -> LayerShape:
        layers = model.model.layers[: model.config.num_hidden_layers]
        attn = layers[0].self_attn
        qk_norm = hasattr(attn, "q_norm")
        norms = [model.model.norm]
        for layer in layers:
            norms += [layer.input_layernorm, layer.post_attention_layernorm]
            norms += [layer.self_attn.q_norm, layer.self_attn.k_norm] if qk_norm else []
        standard = all(hasattr(n, "variance_epsilon") and hasattr(n, "weight") for n in norms)
        return cls(
            head_dim=attn.head_dim,
            num_q_heads=model.config.num_attention_heads,
            num_kv_heads=model.config.num_key_value_heads,
            scaling=attn.scaling,
            has_qk_norm=qk_norm,
            standard_norms=standard,
        )


def rope_tables(rotary_emb, capacity: int, head_dim: int, dtype, device):
    """HF's own rotary embedding at positions 0..capacity-1: (cos, sin_signed) [capacity, D]."""
    positions = torch.arange(capacity, device=device)
    probe = torch.zeros(1, dtype=dtype, device=device)
    cos, sin = rotary_emb(probe, positions[None])  # [1, capacity, D] x 2
    half = head_dim // 2
    sin_signed = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)  # see `attention`
    return cos[0].contiguous(), sin_signed


def decoder_layer(shape, hidden, layer, packed, cos, sin, where, key_cache, value_cache, mask):
    """hidden [B, n, H] -> [B, n, H], as HF's Llama/Qwen decoder layer (its own norms; its
    projection modules, or their merged forms `packed`: oneDNN packs or merged weights), for
    batch 1 (`FastRunner`) and batch B (`BatchRunner`) alike. The attention block
    (attention.py) writes the n new keys/values into the [B, H_kv, capacity, D] caches at
    `where` (rows [B, 1], positions [B, n]) and attends;
    cos, sin_signed: [B | 1, 1, n, D]; mask: additive [B | 1, 1, n, K] or [n, K], over the
    first K cached positions."""
    residual = hidden
    hidden = norm(shape, layer.input_layernorm, hidden)
    hidden = residual + attention(
        shape, layer.self_attn, packed, hidden, cos, sin, where, key_cache, value_cache, mask
    )
    normed = norm(shape, layer.post_attention_layernorm, hidden)
    if packed is None:
        return hidden + layer.mlp(normed)
    gate, up = packed.gate_up(normed).chunk(2, dim=-1)  # [B, n, I] x 2
    return hidden + packed.down(packed.act_fn(gate) * up)  # HF's MLP: down(act(gate) * up)
