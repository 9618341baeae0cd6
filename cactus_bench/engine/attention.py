"""The attention block of the fast forward, one for batch 1 (`FastRunner`) and batch B
(`BatchRunner`): HF's Llama/Qwen attention in the same order, over a static KV cache.

Inputs per call: hidden [B, n, H]; rotary angles cos, sin_signed [B | 1, 1, n, D] (rows at
different positions get their own); `where` = (rows [B, 1], positions [B, n]): row b's n new
keys/values go to its own positions of the [B, H_kv, capacity, D] caches; an additive mask
[B | 1, 1, n, K] (or [n, K]) over the first K cached positions.

- q, k and v come out of one product (`PackedLinear` on oneDNN, `MergedLinear` on the GPU path,
  else HF's three modules joined); RoPE is applied to the q and k heads at once, with
  rotate_half(x) * sin written as roll(x, D/2) * sin_signed, sin_signed being sin with its
  first half negated: equal bit for bit.
- The cache writes are `cache[rows, :, positions] = new` (aten's index_put_), which inductor
  writes in place, where a `scatter_` into a graph input made it copy every layer's whole cache
  each forward (read in its generated code: a decode step's traffic doubled at long contexts),
  and which is fast eagerly in bf16, where ATen's CPU `scatter_` is not (here, SmolLM2's
  shapes: 14 us a call at batch 1, 145 us at batch 8, against 4 us); an eager batch-1 forward
  takes `index_copy_` (2.3 us).
- The attention itself is `decode_attention`: one `F.scaled_dot_product_attention` call with
  `enable_gqa=True` over the cache's first K positions. No K/V is repeated over the query
  heads nor upcast: the fused backends read each key/value head once for its whole group.

Which SDPA backend serves it (`sdpa_backend` reports torch's own choice for given inputs):
- CPU: the fused flash kernel (`_scaled_dot_product_flash_attention_for_cpu`), in fp32 and
  bf16, with the mask and GQA: torch's CPU rules accept both (checked by a test that allows
  the flash backend alone). Math, which would repeat and upcast K/V, is never chosen.
- CUDA (read from torch's dispatch rules, aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
  at pytorch's main branch, 2026; the lent image's torch 2.11 may differ; not yet run on a
  lent card): flash refuses any explicit mask (`check_for_attn_mask`),
  and the static forward needs one (rows sit at different lengths, and a CUDA graph cannot
  shorten the view per step). On an H100/H200 with cuDNN > 9.15 (torch's CUDA 13 wheels)
  torch tries cuDNN first, which takes a mask and GQA (head_dim <= 256, a multiple of 8): it
  serves the decode case; elsewhere the memory-efficient kernel does (mask and GQA on sm80+,
  head_dim a multiple of 8 in bf16). Both stream each cached key/value once per query group.
  `bench.layer_kernels.attention_backend(model)` says which on the card at hand.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend


def norm(shape, module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """HF's RMSNorm `module(x)`: normalised in float32, its weight applied in the input dtype."""
    if not shape.standard_norms:
        return module(x)
    # F.rms_norm computes in float32 and rounds once to x's dtype, as HF's .to(input_dtype).
    return module.weight * F.rms_norm(x, module.weight.shape, eps=module.variance_epsilon)


def attention(shape, attn, packed, hidden, cos, sin, where, key_cache, value_cache, mask):
    """hidden [B, n, H] -> attention output [B, n, H] (module docstring); writes the n new
    keys and values of every row into the caches first."""
    batch, num_new = hidden.shape[:2]
    if packed is None:
        qkv = torch.cat([attn.q_proj(hidden), attn.k_proj(hidden), attn.v_proj(hidden)], dim=-1)
    else:
        qkv = packed.qkv(hidden)  # one product for q, k and v
    heads = qkv.view(batch, num_new, -1, shape.head_dim)  # [B, n, H_q + 2 H_kv, D]
    num_q, num_qk = shape.num_q_heads, shape.num_q_heads + shape.num_kv_heads
    if shape.has_qk_norm:
        query = norm(shape, attn.q_norm, heads[:, :, :num_q])
        qk = torch.cat([query, norm(shape, attn.k_norm, heads[:, :, num_q:num_qk])], dim=2)
    else:
        qk = heads[:, :, :num_qk]
    qk = qk.transpose(1, 2)  # [B, H_q + H_kv, n, D]
    qk = qk * cos + qk.roll(shape.head_dim // 2, dims=-1) * sin  # RoPE (module docstring)
    query, key = qk.split([num_q, shape.num_kv_heads], dim=1)  # [B, H_q | H_kv, n, D]
    value = heads[:, :, num_qk:].transpose(1, 2)  # [B, H_kv, n, D]
    rows, positions = where  # [B, 1], [B, n] (module docstring)
    if batch == 1 and not torch.compiler.is_compiling():
        key_cache.index_copy_(2, positions[0], key)
        value_cache.index_copy_(2, positions[0], value)
    else:  # the [B, n] index of [B, n, H_kv, D] writes
        key_cache[rows, :, positions] = key.transpose(1, 2)
        value_cache[rows, :, positions] = value.transpose(1, 2)
    out = decode_attention(query, key_cache, value_cache, mask, shape.scaling)  # [B, H_q, n, D]
    out = out.transpose(1, 2).reshape(batch, num_new, -1)  # [B, n, H_q * D]
    return attn.o_proj(out) if packed is None else packed.o(out)


def cache_writes(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`where` for rows at positions [B, n]: (rows [B, 1], positions)."""
    return torch.arange(positions.shape[0], device=positions.device)[:, None], positions


def decode_attention(query, key_cache, value_cache, mask, scale: float) -> torch.Tensor:
    """query [B, H_q, n, D] over the first K = mask.shape[-1] positions of the caches
    [B, H_kv, capacity, D] -> [B, H_q, n, D]; GQA without copies (module docstring)."""
    visible = mask.shape[-1]
    return F.scaled_dot_product_attention(
        query,
        key_cache[:, :, :visible],
        value_cache[:, :, :visible],
        attn_mask=mask,
        scale=scale,
        enable_gqa=True,
    )


def sdpa_backend(query, key_cache, value_cache, mask) -> str:
    """The backend torch's SDPA dispatch picks for `decode_attention` on these inputs, e.g.
    'FLASH_ATTENTION' (CPU), 'CUDNN_ATTENTION' or 'EFFICIENT_ATTENTION' (CUDA), 'MATH'."""
    visible = mask.shape[-1]
    choice = torch._fused_sdp_choice(
        query,
        key_cache[:, :, :visible],
        value_cache[:, :, :visible],
        attn_mask=mask,
        enable_gqa=True,
    )
    return SDPBackend(choice).name
