"""The fast forward for B rows at once: a [B, H_kv, capacity, D] static cache with a length per
row, so that rows of one batch sit at different positions and advance by different amounts.

Why: a CPU decode step streams every weight once; with B rows in one forward the same stream
serves B requests, so the verifier alone at batch B costs little more than at batch 1 until the
products become compute-bound (see scripts/bench_batch.py). Speculative rows accept different
numbers of drafts, so after a step row b holds lengths[b] positions, whatever its neighbours.

A forward over `input_ids` [B, n] with `counts` [B] (0 <= counts[b] <= n real tokens per row,
the rest padding) works per row:
- row b's token i sits at position lengths[b] + i: rotary angles and cache writes use it;
- the additive mask lets query i see key k iff k <= lengths[b] + i (and k > that - W in a
  sliding-window layer); padding is written past the row's real tokens, where it is stale and
  masked for every real query, and the next forward overwrites it;
- lengths[b] += counts[b] afterwards; roll-back is setting lengths[b] (`BatchKVCache.crop`).
A row with counts[b] = 0 takes no part: its writes are stale padding, its length stays.

`static_forward` is the same forward with shapes that depend only on (B, n, capacity) and no
host read: it attends over the whole buffer (the eager forward stops at the longest row, which
it reads from the device) and writes no position past the buffer. It is what a CUDA graph
captures (cuda_graphs.py); on a CPU `torch.compile(fullgraph=True)` traces it.

It reuses a `FastRunner`'s model, oneDNN packs or merged products (packed_model.py) and the
decoder layer (compact_layer.py, whose attention block attention.py serves batch 1 and B), and
keeps its own rotary tables, which only grow, so that the single-row runner's tables can be
rebuilt without moving what a captured graph reads. Packs: `FastRunner.uses_packs` on the B * n
rows of each product (`BATCH_PACKED_ROWS` for decode steps of more than 8 rows). The layers run
eagerly (the batch-1 compiled layer is specialised on batch-1 shapes); cuda_graphs.py may compile
the whole static forward before capturing it. Where the fast forward cannot run
(`fast_runner.unsupported_reason`), there is no batched forward either: decoders refuse
batch > 1 there and run batch 1 through `generate`, request by request.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.attention import cache_writes, norm
from cactus_bench.engine.compact_layer import decoder_layer, rope_tables
from cactus_bench.engine.cpu_kernels import PROBE_ROWS
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.static_cache import bucket

# fp32 `FastRunner`s measure their kernels on 1..8 rows only and leave larger products (their
# prefills) to ATen's GEMM. A batched decode step has B * n rows: up to this many, it takes the
# packs wherever they won at 8 rows. Measured (SmolLM2-135M's MLP gate/up, one thread, Intel
# Xeon family 6 model 167, loaded machine): packs 27-40 ms against ATen's 40-49 ms at 12-32 rows.
BATCH_PACKED_ROWS = 32


class BatchKVCache:
    """Per layer keys/values [B, H_kv, capacity, D]; `lengths` [B] int64 valid positions, and
    `host_lengths` their host copy, kept by the engine (which knows every row's length without
    reading the device) for `crop`'s check."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys, self.values = keys, values
        self.lengths = torch.zeros(keys[0].shape[0], dtype=torch.long, device=keys[0].device)
        self.host_lengths = [0] * keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def rows(self, first: int, stop: int) -> BatchKVCache:
        """Slots first..stop-1 as a cache of views (buffers and lengths shared, no copy)."""
        view = BatchKVCache.__new__(BatchKVCache)
        view.keys = [key[first:stop] for key in self.keys]
        view.values = [value[first:stop] for value in self.values]
        view.lengths = self.lengths[first:stop]
        view.host_lengths = _HostSlice(self.host_lengths, first)
        return view

    def crop(self, row: int, length: int) -> None:
        """Rolls row `row` back to its first `length` positions: only its length moves (a write
        to the device, no read: the check uses the host copy)."""
        if not 0 <= length <= self.host_lengths[row]:
            raise RuntimeError(f"cannot crop row {row} of {self.host_lengths[row]} to {length}")
        self.lengths[row] = length
        self.host_lengths[row] = length

    def set_host_lengths(self, lengths: list[tuple[int, int]]) -> None:
        """The host copy follows a roll-back the step made on the device (`lengths`, by
        `SlotState.advance`): (row, length) pairs, every length <= the row's. Host only: a
        step builds nothing from host data."""
        for row, length in lengths:
            if not 0 <= length <= self.host_lengths[row]:
                raise RuntimeError(f"cannot crop row {row} of {self.host_lengths[row]} to {length}")
            self.host_lengths[row] = length

    def advance(self, counts: list[int]) -> None:
        """The host copy follows a forward that fed counts[b] tokens to row b."""
        for row, count in enumerate(counts):
            self.host_lengths[row] += count


class _HostSlice:
    """A window of a cache's host lengths, for `BatchKVCache.rows` views."""

    def __init__(self, lengths: list[int], first: int):
        self.lengths, self.first = lengths, first

    def __getitem__(self, row: int) -> int:
        return self.lengths[self.first + row]

    def __setitem__(self, row: int, value: int) -> None:
        self.lengths[self.first + row] = value

    def __len__(self) -> int:
        return len(self.lengths) - self.first


class BatchRunner:
    """Batched forwards of one `FastRunner`'s model over a `BatchKVCache` of `batch` slots."""

    def __init__(self, runner: FastRunner):
        self.runner = runner
        self.device = runner.device
        self._kept: BatchKVCache | None = None  # the last cache, when `keep` asked for it
        self.rope_cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None  # [capacity, D] x 2

    def new_cache(self, batch: int, capacity: int, keep: bool = False) -> BatchKVCache:
        """Zeroed buffers (masked positions still enter softmax(.) @ V as 0 * value, and
        uninitialised memory may hold NaN) for `batch` slots of at least `capacity` positions.
        keep: reuse the last kept cache when it has at least `batch` slots and room enough (its
        lengths reset), so that CUDA graphs captured on its buffers stay valid from one run to
        the next, a smaller final wave included: its extra slots stay empty (fed nothing, their
        lengths 0) and the full-width graphs replay over them."""
        runner = self.runner
        capacity = bucket(capacity)
        runner.refresh_weights()  # once per batched run: weights replaced or edited since
        kept = self._kept
        if keep and kept is not None and kept.lengths.shape[0] >= batch:
            if kept.capacity >= capacity:
                kept.lengths.zero_()
                kept.host_lengths[:] = [0] * len(kept.host_lengths)
                return kept
        tables = self.rope_cos_sin
        if tables is None or tables[0].shape[0] < capacity:  # grow only: graphs hold them
            rotary = runner.model.model.rotary_emb
            self.rope_cos_sin = rope_tables(
                rotary, capacity, runner.shape.head_dim, runner.dtype, self.device
            )
        self._kept = None  # dropped before the new buffers are allocated
        shape = (batch, runner.shape.num_kv_heads, capacity, runner.shape.head_dim)
        keys = [torch.zeros(shape, dtype=runner.dtype, device=self.device) for _ in runner.layers]
        cache = BatchKVCache(keys, [torch.zeros_like(key) for key in keys])
        self._kept = cache if keep else None
        return cache

    def drop_kept(self) -> None:
        """Forgets the kept cache (`new_cache(keep=True)`), so that its memory can be freed."""
        self._kept = None

    def addresses(self, cache: BatchKVCache) -> tuple[int, ...]:
        """The device addresses a static forward over `cache` reads or writes besides its
        inputs: the cache's tensors, the rotary tables, the model's parameters and buffers and
        the merged products. A CUDA graph captured on them is valid while they are unchanged."""
        tensors = [*_tensors_of(cache), *self.rope_cos_sin]
        model = self.runner.model
        tensors += [*model.parameters(), *model.buffers()]
        for layer in self.runner.layer_products(packed=False):
            if layer is not None:
                tensors += [layer.qkv.weight, layer.gate_up.weight]
        return tuple(tensor.data_ptr() for tensor in tensors)

    def prefill(self, cache: BatchKVCache, row: int, token_ids: list[int]) -> None:
        """Writes `token_ids` into slot `row` from position 0 (no logits): a one-row forward on
        views of that row's buffers, so its neighbours' positions are untouched."""
        cache.lengths[row] = 0
        cache.host_lengths[row] = 0
        if token_ids:
            ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)  # [1, L]
            counts = torch.tensor([len(token_ids)], device=self.device)
            self._run(ids, counts, cache.rows(row, row + 1), decode=False)
            cache.host_lengths[row] = len(token_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        counts: torch.Tensor,
        cache: BatchKVCache,
        all_logits: bool,
        visible: int | None = None,
    ) -> torch.Tensor:
        """input_ids [B, n], counts [B] -> logits [B, n, V] (all_logits; padding positions hold
        junk) or [B, 1, V] (each row's last real position; junk where counts[b] = 0)."""
        hidden = self._run(input_ids, counts, cache, decode=True, visible=visible)  # [B, n, H]
        return self._head(hidden, counts, all_logits, packs_allowed=True)

    def static_forward(
        self, input_ids: torch.Tensor, counts: torch.Tensor, cache: BatchKVCache, all_logits: bool
    ) -> torch.Tensor:
        """`forward` over the whole buffer, with no host read (module docstring). The caller
        keeps every real position inside the buffer (the engine sizes it for that)."""
        hidden = self._run(input_ids, counts, cache, decode=True, static=True)  # [B, n, H]
        return self._head(hidden, counts, all_logits, packs_allowed=False)

    def _head(self, hidden, counts, all_logits: bool, packs_allowed: bool) -> torch.Tensor:
        """Final-normed hidden [B, n, H] -> logits [B, n, V] or [B, 1, V] (last real token)."""
        if not all_logits:
            last = (counts - 1).clamp(min=0)  # [B]
            hidden = hidden[torch.arange(hidden.shape[0], device=self.device), last][:, None]
        runner = self.runner
        rows = hidden.shape[0] * hidden.shape[1]
        packed = packs_allowed and self._packed(rows, decode=True)
        head = runner.packs.head if packed else None
        return runner.model.lm_head(hidden) if head is None else head(hidden)

    def _packed(self, rows: int, decode: bool) -> bool:
        """Whether a product over `rows` rows runs on the packs (`BATCH_PACKED_ROWS`)."""
        probed = max(PROBE_ROWS)
        if decode and probed < rows <= BATCH_PACKED_ROWS:
            return self.runner.uses_packs(probed)
        return self.runner.uses_packs(rows)

    def _run(self, input_ids, counts, cache, decode: bool, static: bool = False, visible=None):
        """input_ids [B, n] -> final-norm hidden states [B, n, H]; lengths += counts.
        static: attend over the whole buffer and read nothing from the device. visible: the
        caller's count of keys any query can see (max length + n, known to the engine without
        a read); None reads it from the device."""
        runner = self.runner
        batch, num_new = input_ids.shape
        positions = cache.lengths[:, None] + torch.arange(num_new, device=self.device)  # [B, n]
        if static:
            # Padding past a full buffer lands on its last position (stale, masked for every
            # real query); the engine never feeds a real token there.
            positions = positions.clamp(max=cache.capacity - 1)
            visible = cache.capacity
        else:
            if visible is None:  # no query sees a key past the largest position
                visible = int(positions.max()) + 1
            if visible > cache.capacity:
                raise RuntimeError(
                    f"batched cache of {cache.capacity} positions cannot hold position "
                    f"{visible - 1}: size it for the longest prompt + new tokens"
                )
        cos_table, sin_table = self.rope_cos_sin  # [capacity', D] x 2, capacity' >= capacity
        cos = cos_table[positions][:, None]  # [B, 1, n, D]
        sin = sin_table[positions][:, None]
        keys_at = torch.arange(visible, device=self.device)  # [K]
        causal = keys_at[None, None, :] <= positions[:, :, None]  # [B, n, K]
        masks: dict[int | None, torch.Tensor] = {None: causal}
        for window in set(runner.windows) - {None}:
            # HF's sliding mask: key k visible from query q iff q - W < k <= q.
            masks[window] = causal & (keys_at[None, None, :] > positions[:, :, None] - window)
        masks = {  # additive [B, 1, n, K], broadcast over the heads
            window: torch.zeros(mask.shape, dtype=runner.dtype, device=self.device)
            .masked_fill_(~mask, float("-inf"))
            .unsqueeze(1)
            for window, mask in masks.items()
        }
        use_packs = not static and self._packed(batch * num_new, decode)
        packs = runner.layer_products(use_packs)
        where = cache_writes(positions)  # row b's tokens at its positions
        hidden = runner.model.model.embed_tokens(input_ids)  # [B, n, H]
        for layer, packed, window, key_cache, value_cache in zip(
            runner.layers, packs, runner.windows, cache.keys, cache.values, strict=True
        ):
            hidden = decoder_layer(
                runner.shape, hidden, layer, packed, cos, sin, where, key_cache, value_cache,
                masks[window],
            )  # fmt: skip
        cache.lengths.add_(counts)  # in place: a view's lengths are its parent's
        return norm(runner.shape, runner.model.model.norm, hidden)


def _tensors_of(cache: BatchKVCache):
    """Every tensor a cache holds (its attributes, and the tensors in its lists)."""
    for value in vars(cache).values():
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, list | tuple):
            yield from (item for item in value if isinstance(item, torch.Tensor))
