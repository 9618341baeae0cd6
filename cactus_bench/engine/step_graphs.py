"""A speculative step as two CUDA graphs per shape: the drafter's m-step loop, then the verify
side (the verifier's forward, its laws, the rule, the last draw and the roll-back).

Why: with every forward captured (cuda_graphs.py), a speculative step still launched m drafter
replays and, between them, the processed law, the draw and the next input as eager ops: on the
lent H200, 0.6B -> 8B shapes at m = 4, the drafter's replays took 46 % of a 25 ms step and the
eager work between them grew with m. `device_step.draft_loop` is tensor-only (it traces whole,
tests/test_device_step.py), so the whole loop (forwards on `BatchRunner.static_forward`, laws,
draws from the step's one uniforms call) is captured once per key and replayed. So is
`device_step.verify_side`, everything between the loop and the step's one read: it reads the
loop graph's static outputs, and the rule runs inside it, so its compiled cost is what the step
pays (a bonus step, with no drafts, replays this graph alone, its loop's few tensors inside).

A `StepGraphs` holds, for the run's caches and its `SlotState` (the graphs read their buffers
and advance the caches' lengths and the slots in place), one graph per key: ("draft" | "verify",
the span's first slot and width, drafts m', first input width, whether unscaled laws are kept,
the sampling groups of the step's rows; the verify side adds its rule groups' shape). A key is
captured the first time a step needs it (its seconds are added to `capture_s`; the step that
captured it includes them). A capture that fails turns both off for good with one logged line
(`failed`), and the steps run eagerly on the captured forwards.
"""

from __future__ import annotations

import logging
import time

import torch

from cactus_bench.engine.cuda_graphs import WARMUP_CALLS

logger = logging.getLogger(__name__)


class StepGraphs:
    """Captured step functions of one run's (caches, slot state) (module docstring)."""

    def __init__(self, device):
        self.device = device
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, object]] = {}
        self._owners: tuple = ()
        self._pool = None
        self.failed: str | None = None
        self.capture_s = 0.0

    def bind(self, *owners) -> None:
        """The objects whose buffers the graphs hold: new ones drop every graph."""
        if len(owners) != len(self._owners) or any(
            a is not b for a, b in zip(owners, self._owners, strict=False)
        ):
            self._graphs, self._pool, self._owners = {}, None, owners

    def replay(self, key: tuple, fn, state: list[torch.Tensor]):
        """fn()'s outputs from the graph captured for `key` (captured now if new), or None
        when capture failed. `state`: tensors fn updates in place (restored after warm-up)."""
        if self.failed is not None:
            return None
        entry = self._graphs.get(key)
        if entry is None:
            start = time.perf_counter()
            entry = self._capture(fn, state)
            self.capture_s += time.perf_counter() - start
            if entry is None:
                return None
            self._graphs[key] = entry
        graph, outputs = entry
        graph.replay()
        return outputs

    def _capture(self, fn, state: list[torch.Tensor]):
        saved = [tensor.clone() for tensor in state]

        def restore():
            for tensor, value in zip(state, saved, strict=True):
                tensor.copy_(value)

        try:
            current = torch.cuda.current_stream(self.device)
            side = torch.cuda.Stream(self.device)
            side.wait_stream(current)
            with torch.cuda.stream(side):
                for _ in range(WARMUP_CALLS):  # cuBLAS picks its kernels outside the capture
                    fn()
                    restore()
            current.wait_stream(side)
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                outputs = fn()
            restore()
        except Exception as error:  # noqa: BLE001 - an op that cannot be captured
            self.failed = f"{type(error).__name__}: {str(error).splitlines()[0]}"
            restore()
            logger.warning("speculative steps run eagerly: a capture failed (%s)", self.failed)
            return None
        return graph, outputs


def advanced_buffers(slots, caches: dict) -> list[torch.Tensor]:
    """What the verify side updates in place (`SlotView.advance`): the slots' buffers (the
    guards' think state included) and the caches' lengths, which a capture's warm-up puts back."""
    buffers = [slots.seq_len, slots.budget, slots.verifier_id, slots.drafter_ids]
    buffers += [slots.drafter_count, slots.in_think]
    return [*buffers, *(cache.lengths for cache in caches.values())]
