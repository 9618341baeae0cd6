"""Whole forwards as CUDA graphs: one launch per forward instead of one per aten op.

Why: on the lent H200 an eager decoder layer was ~45 aten ops of ~19 us launch each, so a batch-1
forward of a Qwen3-0.6B shape cost 17.2 ms eager against 2.88 ms replayed (a 0.28 ms weight
floor; docs/gpu.md): GPU time was launches, not bytes. vLLM, SGLang and gpt-fast capture the
whole decode forward once per static shape and replay it; this module does the same for the
batched engine's forwards (`BatchRunner.static_forward`: embedding to logits, static shapes, no
host read).

A `GraphedRunner` holds, for one batched cache and per shape (rows, new tokens n, all_logits),
one captured graph with its static inputs (input_ids [B, n], counts [B]) and output (logits). The
cache's buffers and its `lengths` [B] are the graph's state: every replay reads and advances
them in place, so a cache must keep its addresses (`BatchRunner.new_cache(keep=True)`, which
also serves a smaller later wave from the same, wider cache).

Graphs are keyed on every address they captured (`BatchRunner.addresses`: the cache's
tensors, the rotary tables, the weights and merged products): `capture` drops them and
captures again when any moved, and `forward` replays only for the cache and tables it
captured on (a cheap identity check per call), else runs eagerly.

- `capture(cache, sizes)` records every shape a run will use, at the run's start and outside its
  clock (the engine records the seconds); capturing leaves the cache's lengths as they were.
- `forward(...)` copies the inputs into the static buffers, replays, and returns the static
  output: valid until the next replay of the same shape (the engine consumes it before then).
- A shape that was not captured runs eagerly (`static_forward`), and a capture that fails
  turns the runner eager for good with one logged line, so a run never stops for a graph.

fused (default: the runner's `FastRunner.compiled`, i.e. engine.compile resolved on): the static
forward is compiled by inductor (fused pointwise kernels) and then captured. Measured on the
lent H200 (0.6B shape, batch 1): 2.46 ms a replay against 2.88 ms for the captured eager
forward, so compiling pays there; it costs a compile per shape at the run's start.

The decision (`resolve_cuda_graphs`): engine.cuda_graphs = auto (on for CUDA, off elsewhere) |
on (CUDA only) | off.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import torch

from cactus_bench.engine.batch_cache import BatchKVCache, BatchRunner

GRAPH_MODES = ("auto", "on", "off")
# Captures that warm up first: cuBLAS picks its kernels and allocates its workspace on the first
# calls, which a graph cannot do while capturing.
WARMUP_CALLS = 2
logger = logging.getLogger(__name__)


def resolve_cuda_graphs(mode: str, device: torch.device) -> bool:
    """Whether forwards on `device` run as CUDA graphs; a clear error for a bad mode."""
    if mode not in GRAPH_MODES:
        raise ValueError(f"cuda_graphs must be one of {', '.join(GRAPH_MODES)}; got {mode!r}")
    if mode == "on" and device.type != "cuda":
        raise ValueError(f"cuda_graphs='on' needs a CUDA device (got {device}): use 'auto'")
    return mode != "off" and device.type == "cuda"


@dataclass
class CapturedForward:
    graph: torch.cuda.CUDAGraph
    input_ids: torch.Tensor  # [B, n] int64, static
    counts: torch.Tensor  # [B] int64, static
    logits: torch.Tensor  # [B, n | 1, V], static: overwritten by every replay


class GraphedRunner:
    """A `BatchRunner`'s forwards, each static shape captured once per cache (module doc)."""

    def __init__(self, runner: BatchRunner, fused: bool | None = None):
        self.runner = runner
        self.device = runner.device
        # fused: the static forward compiled by inductor (fewer, fused kernels) before capture.
        self.fused = runner.runner.compiled if fused is None else bool(fused)
        self._forward = runner.static_forward
        if self.fused:
            self._forward = torch.compile(runner.static_forward, fullgraph=True, dynamic=False)
        self._graphs: dict[tuple, CapturedForward] = {}  # (rows, n, all_logits) -> graph
        self._cache: BatchKVCache | None = None  # the cache every graph was captured on
        self._addresses: tuple[int, ...] = ()  # `BatchRunner.addresses` at capture
        self._tables = None  # the rotary tables the graphs read (kept alive with them)
        self._pool = None  # one memory pool for every graph of this runner
        self.failed: str | None = None  # why capture stopped; forwards then run eagerly
        self.capture_s = 0.0  # seconds spent capturing, over the runner's life
        self.replays = 0  # graphs replayed, over the runner's life (the engine's device_stats)

    def capture(self, cache: BatchKVCache, sizes: list[tuple[int, bool]]) -> float:
        """Captures (n, all_logits) for every size on all of the cache's rows; returns the
        seconds it took (0 when all were captured before). Graphs hold the addresses they were
        captured on: a new cache, or any moved address, drops them first."""
        addresses = self.runner.addresses(cache)
        if cache is not self._cache or addresses != self._addresses:
            self._graphs, self._pool, self._cache = {}, None, cache
            self._addresses, self._tables = addresses, self.runner.rope_cos_sin
        rows = cache.lengths.shape[0]
        missing = [(n, every) for n, every in sizes if (rows, n, every) not in self._graphs]
        if not missing or self.failed is not None:
            return 0.0
        start = time.perf_counter()
        for num_new, all_logits in missing:
            self._capture((rows, num_new, all_logits), cache, rows, num_new, all_logits)
        seconds = time.perf_counter() - start
        self.capture_s += seconds
        return seconds

    def forward(
        self, input_ids: torch.Tensor, counts: torch.Tensor, cache: BatchKVCache, all_logits: bool
    ) -> torch.Tensor:
        """`BatchRunner.static_forward`, replayed where captured (module doc)."""
        rows, num_new = input_ids.shape
        captured = self._graphs.get((rows, num_new, all_logits))
        current = cache is self._cache and self.runner.rope_cos_sin is self._tables
        if captured is None or not current:
            return self.runner.static_forward(input_ids, counts, cache, all_logits)
        captured.input_ids.copy_(input_ids)
        captured.counts.copy_(counts)
        self.replays += 1
        captured.graph.replay()
        return captured.logits

    def _capture(self, key, cache: BatchKVCache, rows: int, num_new: int, all_logits: bool):
        input_ids = torch.zeros((rows, num_new), dtype=torch.long, device=self.device)
        counts = torch.zeros(rows, dtype=torch.long, device=self.device)
        lengths = cache.lengths.clone()  # capture runs the forward: put the lengths back after

        def run():
            logits = self._forward(input_ids, counts, cache, all_logits)
            cache.lengths.copy_(lengths)
            return logits

        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(WARMUP_CALLS):
                    run()
            torch.cuda.current_stream(self.device).wait_stream(side)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                logits = self._forward(input_ids, counts, cache, all_logits)
            cache.lengths.copy_(lengths)
        except Exception as error:  # noqa: BLE001 - an op that cannot be captured, a compile error
            reason = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            cache.lengths.copy_(lengths)
            if self.fused:  # the compiled forward failed: capture the eager one instead
                logger.warning("fused capture failed (%s): capturing the eager forward", reason)
                self.fused, self._forward = False, self.runner.static_forward
                return self._capture(key, cache, rows, num_new, all_logits)
            self.failed = reason
            logger.warning(
                "CUDA graphs off, forwards run eagerly: capture failed (%s)", self.failed
            )
            return
        self._graphs[key] = CapturedForward(graph, input_ids, counts, logits)
