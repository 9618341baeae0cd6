"""The fast forward: a static KV cache and a compact decoder forward over the HF module's weights.

Why: HF's eager forward spends part of each batch-1 step on model-level glue (mask building,
cache bookkeeping, attention dispatch) and, on GPUs, on kernel launches. This runner keeps the HF
modules (projections, norms, Qwen3's q/k norms, MLP, output head) and replaces the glue
with a few lines that `torch.compile` traces into one graph per decoder layer and input length.
On this project's 2-core CPU a SmolLM2-135M step is mostly the time to stream its 540 MB of fp32
weights through one core (matrix-vector products at ~6-7 GB/s), which no forward path removes;
scripts/bench_forward.py measures what is left to gain (results/bench/forward.csv).

- `StaticKVCache`: per layer a preallocated [1, H_kv, capacity, D] key and value buffer plus an
  explicit `length`. A forward over n tokens writes positions length..length+n-1 in place;
  rolling back rejected tokens is `crop(length)`, i.e. moving the length (no tensor copies).
  Entries beyond the length are stale: the attention mask hides them and the next forward
  overwrites them.
- The forward attends over the whole buffer with a boolean mask (key position <= query position,
  and inside the sliding window where a layer has one), so its shapes depend only on the number of
  new tokens n and the capacity: the engine uses n = 1, 2 (the drafter's catch-up) and m + 1.
- The rotary tables are HF's own `rotary_emb` evaluated once for positions 0..capacity-1, so any
  rope scaling that does not depend on the sequence length (default, linear, llama3, yarn) matches.

Supported: Llama, Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm) causal LMs, any head
module (e.g. the drafter's `SubsetLMHead`, which runs eagerly after the compiled body). Other
architectures (Gemma 2: scaled embeddings, soft-capping, extra norms) use the eager HF path;
`unsupported_reason(model)` says why.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Mistral is left out on purpose: its sliding window applies to every layer without layer_types.
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
MIN_CAPACITY = 256  # capacities are powers of two from here: few distinct compiled shapes


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


def enable_compile_cache() -> None:
    """Keeps inductor's FX graph cache on (torch's default; compiled kernels are reused by later
    runs from $TORCHINDUCTOR_CACHE_DIR, default /tmp/torchinductor_$USER)."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = True
    inductor_config.autotune_local_cache = True
    # Every FastRunner compiles the same layer function: one graph per (new-token count,
    # capacity bucket, model shape). The default limit of 8 would silently fall back to eager.
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 256)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 1024)


class StaticKVCache:
    """Preallocated keys/values ([1, H_kv, capacity, D] per layer) and the number of valid
    positions. Owned by one `FastRunner`, which recycles the buffers for its next request."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys, self.values = keys, values
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, length: int) -> None:
        """Rolls back to the first `length` positions: only the length moves."""
        if not 0 <= length <= self.length:
            raise RuntimeError(f"cannot crop a cache of {self.length} to {length} tokens")
        self.length = length


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FastRunner:
    """`ModelRunner`'s interface (new_cache, forward, prefilled_cache) on a `StaticKVCache`.

    compile: False (the compact forward runs eagerly) or True: `torch.compile` of ONE decoder
    layer, reused by every layer (torch >= 2.5 inlines nn.Modules, so the weights are graph inputs
    and the 30 layers of SmolLM2 share one graph per input length: compiling the whole 30-layer
    body instead took ~65 s per length here, one layer ~15 s, ~2 s from inductor's on-disk
    cache). CPU: inductor; CUDA: mode="reduce-overhead" (CUDA graphs). Embedding, masks, final
    norm and head stay eager (a handful of operations). Prefill always runs eagerly: prompt
    lengths vary, and one forward over many tokens is dominated by its matrix products.

    sizes: new-token counts to compile for (e.g. {1, m + 1}); a forward over n tokens is padded
    to the smallest registered size >= n, so the last steps of a request, which draft fewer than
    m tokens, reuse the m + 1 graph. Padded positions are written past the cache length, where
    they are stale (masked, later overwritten); their logits are dropped.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        compile: bool = False,
        sizes: tuple[int, ...] = (1,),
    ):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the fast forward cannot run {type(model).__name__}: {reason}")
        self.model = model.eval()
        self.device = device
        config = model.config
        self.layers = list(model.model.layers[: config.num_hidden_layers])
        attn = self.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.num_kv_heads = config.num_key_value_heads
        self.dtype = model.model.embed_tokens.weight.dtype
        layer_types = getattr(config, "layer_types", None) or ["full_attention"] * len(self.layers)
        window = getattr(config, "sliding_window", None)
        # Per layer: None (full causal attention) or the window W (attend to the last W keys).
        self.windows = [window if kind == "sliding_attention" else None for kind in layer_types]
        self.has_qk_norm = hasattr(attn, "q_norm")
        self._storage: StaticKVCache | None = None
        self._rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None  # [capacity, D] x 2
        self._key_positions: torch.Tensor | None = None  # [capacity] 0..capacity-1
        self.sizes = sorted({int(n) for n in sizes})
        self._warm_buckets: set[int] = set()  # cache capacities already compiled for
        self.compiled = bool(compile)
        self._layer = self._eager_layer
        if self.compiled:
            enable_compile_cache()
            mode = "reduce-overhead" if device.type == "cuda" else None
            self._layer = torch.compile(self._eager_layer, dynamic=False, fullgraph=True, mode=mode)

    def warmup(self, capacity: int = 0) -> None:
        """Runs each registered size through the compiled layer for caches of `capacity`
        positions (graphs are specialised on the capacity bucket), three times on CUDA so that
        CUDA graphs are recorded; once per bucket. It recycles the cache buffers: never call it
        while a request's cache is in use."""
        bucket = _bucket(max(capacity, MIN_CAPACITY))
        if not self.compiled or bucket in self._warm_buckets:
            return
        self._warm_buckets.add(bucket)
        for size in self.sizes:
            cache = self.new_cache(capacity)
            ids = torch.zeros((1, size), dtype=torch.long, device=self.device)
            for _ in range(3 if self.device.type == "cuda" else 1):
                self.forward(ids, cache, all_logits=True)
                cache.crop(0)

    # ----------------------------------------------------------------------------- caches
    def new_cache(self, capacity: int = 0) -> StaticKVCache:
        """An empty cache for at least `capacity` positions (it grows later if needed).

        The buffers of the previous cache are reused when large enough (stable addresses, which
        CUDA graphs need): a runner serves one request at a time."""
        capacity = _bucket(capacity)
        storage = self._storage
        if storage is None or storage.capacity < capacity:
            shape = (1, self.num_kv_heads, capacity, self.head_dim)
            # Zeros, not empty: masked positions still enter softmax(.) @ V as 0 * value, and
            # uninitialised memory may hold NaN.
            keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.layers]
            values = [torch.zeros_like(key) for key in keys]
            if self.compiled and self.device.type == "cuda":
                for buffer in (*keys, *values):
                    torch._dynamo.mark_static_address(buffer)
            storage = self._storage = StaticKVCache(keys, values)
            self._build_tables(capacity)
        return StaticKVCache(storage.keys, storage.values)

    def prefilled_cache(
        self, token_ids: list[int], rollback: bool = True, capacity: int = 0
    ) -> StaticKVCache:
        """A new cache holding `token_ids` (no logits are computed). Roll-back is always
        possible: sliding windows are applied by the mask, the buffers keep every position."""
        cache = self.new_cache(max(capacity, len(token_ids) + max(self.sizes)))
        if token_ids:
            ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
            self._run(ids, cache, compiled=False)
        return cache

    def _grow(self, cache: StaticKVCache, needed: int) -> None:
        """Moves `cache` into buffers of at least `needed` positions (rare: copies once, and
        compiled graphs for the new capacity are built on first use)."""
        old_keys, old_values, length = cache.keys, cache.values, cache.length
        self._storage = None
        bigger = self.new_cache(needed)
        for layer, (key, value) in enumerate(zip(old_keys, old_values, strict=True)):
            bigger.keys[layer][:, :, :length] = key[:, :, :length]
            bigger.values[layer][:, :, :length] = value[:, :, :length]
        cache.keys, cache.values = bigger.keys, bigger.values

    def _build_tables(self, capacity: int) -> None:
        positions = torch.arange(capacity, device=self.device)
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        cos, sin = self.model.model.rotary_emb(probe, positions[None])  # [1, capacity, D] x 2
        self._rope_tables = (cos[0].contiguous(), sin[0].contiguous())
        self._key_positions = positions

    # ---------------------------------------------------------------------------- forward
    def forward(self, input_ids: torch.Tensor, cache: StaticKVCache, all_logits: bool):
        """input_ids [1, n] -> logits [1, n, V] (all_logits) or [1, 1, V] (last position)."""
        num_new = input_ids.shape[1]
        padded = next((size for size in self.sizes if size >= num_new), num_new)
        if self.compiled and padded > num_new:
            filler = input_ids.new_zeros((1, padded - num_new))
            input_ids = torch.cat([input_ids, filler], dim=1)  # [1, padded]
        hidden = self._run(input_ids, cache, compiled=self.compiled)  # [1, n', H] final-normed
        cache.length -= input_ids.shape[1] - num_new  # the padding stays stale
        hidden = hidden[:, :num_new] if all_logits else hidden[:, num_new - 1 : num_new]
        return self.model.lm_head(hidden)

    def _run(self, input_ids: torch.Tensor, cache: StaticKVCache, compiled: bool):
        """input_ids [1, n] -> final-norm hidden states [1, n, H]; appends n positions."""
        num_new = input_ids.shape[1]
        start = cache.length
        if start + num_new > cache.capacity:
            self._grow(cache, start + num_new)
        positions = torch.arange(start, start + num_new, device=self.device)  # [n]
        cos_table, sin_table = self._rope_tables
        cos = cos_table.index_select(0, positions)[None, None]  # [1, 1, n, D]
        sin = sin_table.index_select(0, positions)[None, None]
        key_positions = self._key_positions
        causal = key_positions[None, :] <= positions[:, None]  # [n, capacity]
        masks: dict[int | None, torch.Tensor] = {None: causal}
        for window in set(self.windows) - {None}:
            # HF's sliding mask: key k visible from query q iff q - W < k <= q.
            masks[window] = causal & (key_positions[None, :] > positions[:, None] - window)
        layer_fn = self._layer if compiled else self._eager_layer
        if compiled and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are consumed
        hidden = self.model.model.embed_tokens(input_ids)  # [1, n, H]
        for layer, window, key_cache, value_cache in zip(
            self.layers, self.windows, cache.keys, cache.values, strict=True
        ):
            hidden = layer_fn(
                hidden, layer, cos, sin, positions, key_cache, value_cache, masks[window]
            )
        cache.length = start + num_new
        return self.model.model.norm(hidden)

    def _eager_layer(self, hidden, layer, cos, sin, positions, key_cache, value_cache, mask):
        """One decoder layer, hidden [1, n, H] -> [1, n, H], as HF's Llama/Qwen decoder layer
        (its own norm, projection and MLP modules); writes the n new keys/values into the
        [1, H_kv, capacity, D] caches in place."""
        residual = hidden
        hidden = layer.input_layernorm(hidden)
        hidden = residual + self._attention(
            layer.self_attn, hidden, cos, sin, positions, key_cache, value_cache, mask
        )
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def _attention(self, attn, hidden, cos, sin, positions, key_cache, value_cache, mask):
        """One attention block over the static cache (HF's Llama/Qwen attention, same order)."""
        num_new = hidden.shape[1]
        shape = (1, num_new, -1, self.head_dim)
        query = attn.q_proj(hidden).view(shape)  # [1, n, H_q, D]
        key = attn.k_proj(hidden).view(shape)  # [1, n, H_kv, D]
        value = attn.v_proj(hidden).view(shape).transpose(1, 2)  # [1, H_kv, n, D]
        if self.has_qk_norm:  # Qwen3: RMSNorm over each head before RoPE
            query, key = attn.q_norm(query), attn.k_norm(key)
        query, key = query.transpose(1, 2), key.transpose(1, 2)
        query = query * cos + _rotate_half(query) * sin  # RoPE, as HF's apply_rotary_pos_emb
        key = key * cos + _rotate_half(key) * sin
        key_cache.index_copy_(2, positions, key)
        value_cache.index_copy_(2, positions, value)
        # GQA without copies: enable_gqa broadcasts each key/value head over its query group.
        out = F.scaled_dot_product_attention(
            query, key_cache, value_cache, attn_mask=mask, scale=self.scaling, enable_gqa=True
        )  # [1, H_q, n, D]
        return attn.o_proj(out.transpose(1, 2).reshape(1, num_new, -1))


def _bucket(capacity: int) -> int:
    """The smallest power of two >= max(capacity, MIN_CAPACITY)."""
    size = MIN_CAPACITY
    while size < capacity:
        size *= 2
    return size
