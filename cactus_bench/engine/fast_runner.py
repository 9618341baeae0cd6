"""The fast forward: a static KV cache and a compact decoder forward over the HF module's weights.

Why: HF's eager forward spends part of each batch-1 step on model-level glue (mask building,
cache bookkeeping, attention dispatch) and, on GPUs, on kernel launches. This runner keeps the HF
modules' weights and numerics and replaces the glue with a few lines (compact_layer.py) that
`torch.compile` can trace into one graph per decoder layer and input length. On a CPU a batch-1
step is mostly the time to stream the weights through one core (SmolLM2-135M: 540 MB in fp32),
so every linear layer must stream its weights once per forward whatever the new tokens.

- `StaticKVCache` (static_cache.py): preallocated key/value buffers and a length; roll-back
  moves the length.
- The forward attends over the whole buffer with an additive mask (causal, and inside the
  sliding window where a layer has one), so its shapes depend only on the number of new tokens n
  (the engine uses 1, 2 and m + 1) and the capacity.
- The rotary tables are HF's own `rotary_emb` at positions 0..capacity-1, so any rope scaling
  that does not depend on the sequence length (default, linear, llama3, yarn) matches.
- Linear kernels (cpu_kernels.py, packed_model.py): on an x86 CPU with oneDNN, weights packed
  once for oneDNN (q/k/v and gate/up fused), whose cost hardly grows from 1 to 6 rows; elsewhere
  (CUDA, other CPUs, compiled layers) `F.linear`, on q/k/v and gate/up merged into one product
  each on a GPU (`merged`). `linear_kernel` and `uses_packs(n)` say which.

Supported: Llama, Qwen2 (q/k/v biases) and Qwen3 (q/k RMSNorm) causal LMs, any head module.
Others (Gemma 2) use the eager HF path; `unsupported_reason(model)` says why. A model that
accelerate dispatched over devices (`device_map="auto"`, offloading) carries hooks that move
weights around each module's `forward`, which the compact forward would bypass: it runs HF's
forward instead (`runtime.make_runner` says so). A device_map onto one device installs no hooks.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.attention import cache_writes, norm
from cactus_bench.engine.compact_layer import LayerShape, decoder_layer, rope_tables
from cactus_bench.engine.compact_layer import unsupported_reason as architecture_reason
from cactus_bench.engine.cpu_kernels import resolve_linear_kernel
from cactus_bench.engine.packed_model import merged_layers, packed_model, unpackable_reason
from cactus_bench.engine.static_cache import StaticKVCache
from cactus_bench.engine.static_cache import bucket as _bucket

__all__ = ["FastRunner", "StaticKVCache", "enable_compile_cache", "unsupported_reason"]


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """None when the fast forward reproduces `model`, else a one-line reason it cannot: an
    architecture the compact forward lacks, or a model dispatched over devices by accelerate."""
    return dispatch_reason(model) or architecture_reason(model)


def dispatch_reason(model: torch.nn.Module) -> str | None:
    """Why accelerate's per-layer device moves rule the fast forward out, or None."""
    hooked = sum(1 for module in model.modules() if getattr(module, "_hf_hook", None) is not None)
    if not hooked:
        return None
    devices = sorted(
        {str(device) for device in (getattr(model, "hf_device_map", None) or {}).values()}
    )
    where = f"device_map over {', '.join(devices)}" if devices else "accelerate offload hooks"
    return (
        f"dispatched by accelerate ({where}; {hooked} hooked modules): the fast forward keeps one "
        "KV cache on one device and would bypass the hooks' per-layer moves"
    )


def enable_compile_cache() -> None:
    """Keeps inductor's FX graph cache on (torch's default; compiled kernels are reused by later
    runs from $TORCHINDUCTOR_CACHE_DIR, default /tmp/torchinductor_$USER)."""
    import torch._dynamo.config as dynamo_config  # lazy: keeps torch's compiler out of the engine
    import torch._inductor.config as inductor_config  # lazy: as above

    inductor_config.fx_graph_cache = True
    inductor_config.autotune_local_cache = True
    # Every FastRunner compiles the same layer function: one graph per (new-token count,
    # capacity bucket, model shape). The default limit of 8 would silently fall back to eager.
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 256)
    dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 1024)


class FastRunner:
    """`ModelRunner`'s interface (new_cache, forward, prefilled_cache) on a `StaticKVCache`.

    compile: False (eager) or True: `torch.compile` of ONE decoder layer, reused by every layer
    (nn.Modules are inlined, so the weights are graph inputs and SmolLM2's 30 layers share one
    graph per input length: the whole body took ~65 s per length here, one layer ~15 s, ~2 s
    from inductor's cache). CPU: inductor; CUDA: mode="reduce-overhead". Embedding, masks, final
    norm and head stay eager; prefill always runs eagerly (its products dominate).

    sizes: new-token counts to compile for (e.g. {1, m + 1}); a forward over n tokens is padded
    to the smallest registered size >= n (the last steps of a request reuse the m + 1 graph);
    padded positions are written past the cache length (stale, masked) and their logits dropped.

    linear_kernel: "auto" (oneDNN on packed weights where `cpu_kernels.resolve_linear_kernel`
    allows it and the layers are not compiled, else "aten"; bf16: every forward on the packs,
    fp32: the row counts measured faster on them, see `packed_model`), "onednn" (always the
    packs) or "aten" (HF's modules; compiled layers always, inductor cannot trace the packs).
    `uses_packs(n)` says what a forward over n tokens runs.

    merged: where the packs do not run, q/k/v and gate/up as one product each
    (`packed_model.merged_layers`: the parameters become views, no copy). None: on CUDA only
    (launch-bound decode; a CPU streams the same bytes either way and has the packs).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        compile: bool = False,
        sizes: tuple[int, ...] = (1,),
        linear_kernel: str = "auto",
        merged: bool | None = None,
    ):
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"the fast forward cannot run {type(model).__name__}: {reason}")
        self.model = model.eval()
        self.device = device
        config = model.config
        self.layers = list(model.model.layers[: config.num_hidden_layers])
        self.shape = LayerShape.of(model)
        self.dtype = model.model.embed_tokens.weight.dtype
        layer_types = getattr(config, "layer_types", None) or ["full_attention"] * len(self.layers)
        window = getattr(config, "sliding_window", None)
        # Per layer: None (full causal attention) or the window W (attend to the last W keys).
        self.windows = [window if kind == "sliding_attention" else None for kind in layer_types]
        self._storage: StaticKVCache | None = None
        self._rope_tables: tuple[torch.Tensor, torch.Tensor] | None = None  # [capacity, D] x 2
        self._key_positions: torch.Tensor | None = None  # [capacity] 0..capacity-1
        self.sizes = sorted({int(n) for n in sizes})
        self._warm_buckets: set[int] = set()  # cache capacities already compiled for
        self.compiled = bool(compile)
        self.linear_kernel = self._resolve_kernel(linear_kernel)
        self.packs = packed_model(model) if self.linear_kernel == "onednn" else None
        self._always_packed = linear_kernel == "onednn"  # else packs.packed_for(n) decides
        if merged is None:
            merged = device.type == "cuda"
        self.merged = bool(merged) and unpackable_reason(model) is None
        self._merged = merged_layers(model) if self.merged else None
        self._layer = self._eager_layer
        if self.compiled:
            enable_compile_cache()
            mode = "reduce-overhead" if device.type == "cuda" else None
            self._layer = torch.compile(self._eager_layer, dynamic=False, fullgraph=True, mode=mode)

    def _resolve_kernel(self, requested: str) -> str:
        kernel = resolve_linear_kernel(requested, self.device, self.dtype)
        if kernel == "aten":
            return kernel
        reason = unpackable_reason(self.model)
        if self.compiled:
            reason = "compiled layers trace HF's modules (inductor cannot trace packed weights)"
        if reason is not None and requested == "onednn":
            raise ValueError(f"linear kernel 'onednn' cannot run here: {reason}; use 'auto'")
        return "aten" if reason is not None else kernel

    def uses_packs(self, num_new: int) -> bool:
        """Whether a forward over `num_new` tokens runs the oneDNN packs (else HF's modules)."""
        if self.packs is None:
            return False
        return self._always_packed or self.packs.packed_for(num_new)

    def warmup(self, capacity: int = 0) -> None:
        """Runs each registered size through the compiled layer for caches of `capacity`
        positions (graphs are specialised on the capacity bucket), three times on CUDA so that
        CUDA graphs are recorded; once per bucket. It recycles the cache buffers: never call it
        while a request's cache is in use."""
        bucket = _bucket(capacity)
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
            shape = (1, self.shape.num_kv_heads, capacity, self.shape.head_dim)
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
        self.refresh_weights()
        if token_ids:
            ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
            self._run(ids, cache, compiled=False)
        return cache

    def refresh_weights(self) -> None:
        """Once per request: merge again parameters replaced since, re-pack weights edited
        since (both keyed on the parameters' data pointers, the packs also on versions)."""
        if self._merged is not None:
            self._merged = merged_layers(self.model)
        if self.packs is not None:
            self.packs = packed_model(self.model)

    def layer_products(self, packed: bool) -> list:
        """Per layer what `decoder_layer` takes as `packed`: the oneDNN packs (packed), else
        the merged products, else None (HF's modules)."""
        layers = len(self.layers)
        if packed:
            return self.packs.layers[:layers]
        return self._merged[:layers] if self._merged is not None else [None] * layers

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
        self._rope_tables = rope_tables(
            self.model.model.rotary_emb, capacity, self.shape.head_dim, self.dtype, self.device
        )  # (cos, sin_signed) [capacity, D] x 2
        self._key_positions = torch.arange(capacity, device=self.device)

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
        head = self.packs.head if self.uses_packs(hidden.shape[1]) else None
        return self.model.lm_head(hidden) if head is None else head(hidden)

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
        # Eager: only the first start + n keys can be visible; compiled: the whole buffer, so
        # that the graph's shapes depend on the capacity bucket, not on the position.
        key_positions = self._key_positions[: None if compiled else start + num_new]  # [K]
        causal = key_positions[None, :] <= positions[:, None]  # [n, K]
        masks: dict[int | None, torch.Tensor] = {None: causal}
        for window in set(self.windows) - {None}:
            # HF's sliding mask: key k visible from query q iff q - W < k <= q.
            masks[window] = causal & (key_positions[None, :] > positions[:, None] - window)
        masks = {  # additive (0 / -inf), as SDPA would convert the boolean ones in every layer
            window: torch.zeros(mask.shape, dtype=self.dtype, device=self.device).masked_fill_(
                ~mask, float("-inf")
            )
            for window, mask in masks.items()
        }
        layer_fn = self._layer if compiled else self._eager_layer
        if compiled and self.device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are consumed
        packs = self.layer_products(self.uses_packs(num_new))
        where = cache_writes(positions[None])  # the cache writes (attention.py)
        hidden = self.model.model.embed_tokens(input_ids)  # [1, n, H]
        for layer, packed, window, key_cache, value_cache in zip(
            self.layers, packs, self.windows, cache.keys, cache.values, strict=True
        ):
            hidden = layer_fn(
                hidden, layer, packed, cos, sin, where, key_cache, value_cache, masks[window]
            )
        cache.length = start + num_new
        return norm(self.shape, self.model.model.norm, hidden)

    def _eager_layer(self, *args):
        """`compact_layer.decoder_layer` for this model (what torch.compile traces)."""
        return decoder_layer(self.shape, *args)
