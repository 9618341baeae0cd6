"""The inputs of a batched step's model calls: its forwards over the step's span of slots, the
span's cache views, and the processed laws per sampling group (batch_steps.py runs them; the
captured step functions, step_graphs.py, replay the same forwards and laws).

`StepForward.follow` is the host's side of a forward (each row's cache length, from the counts
the host knows): a replayed draft loop calls it for the forwards it ran inside its graph.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.batched import BatchRun, Row, group_by_sampling
from cactus_bench.engine.sampling import process_logits


class StepForward:
    """Batched forwards of model `name` over the step's span of slots first..stop-1:
    (ids [S', w] vocabulary ids, counts [S'] device, fed: host counts per row of `rows`,
    all_logits) -> restricted logits [S', n, K].

    Eager: over the span. CUDA graphs: over every slot (the span is all of them), as wide as
    the smallest captured shape that holds w, so the forward replays one captured graph. The
    host follows each row's cache length from `fed` (no read)."""

    def __init__(self, decoder, run: BatchRun, name: str, rows, first: int, stop: int):
        self.decoder, self.run, self.name = decoder, run, name
        self.first, self.stop = first, stop
        self.at = [row.slot - first for row in rows]  # each row's place in the span

    def __call__(self, ids, counts, fed: list[int], all_logits: bool) -> torch.Tensor:
        run, decoder = self.run, self.decoder
        cache = run.caches[self.name]
        if run.graphs is not None:
            width = run.graph_width(self.name, ids.shape[1], all_logits)
            runner = run.graphs[self.name]
        else:
            cache, runner = cache.rows(self.first, self.stop), run.runners[self.name]
            width = ids.shape[1]
        if width > ids.shape[1]:
            ids = torch.nn.functional.pad(ids, (0, width - ids.shape[1]))
        run.forwards += 1
        if run.graphs is not None:
            logits = runner.forward(ids, counts, cache, all_logits)  # [S, n, V]
        else:  # the keys any query sees, from the host's lengths: no read of the device
            visible = max(cache.host_lengths[slot] for slot in range(self.stop - self.first))
            logits = runner.forward(ids, counts, cache, all_logits, visible + width)
        self.follow(fed)
        if decoder.token_map is not None:
            logits = logits.index_select(-1, decoder.token_map)  # [S', n, K] the shared ids
        return logits

    def follow(self, fed: list[int]) -> None:
        """The host's copy of the cache lengths after a forward that fed fed[i] tokens to row i."""
        span_counts = [0] * (self.stop - self.first)
        for place, count in zip(self.at, fed, strict=True):
            span_counts[place] = count
        self.run.caches[self.name].rows(self.first, self.stop).advance(span_counts)

    def static(self, ids, counts, all_logits: bool = False) -> torch.Tensor:
        """The same forward on `BatchRunner.static_forward` over every slot (what a captured
        step function runs inside its graph; the host follows with `follow`)."""
        runner, cache = self.run.runners[self.name], self.run.caches[self.name]
        logits = runner.static_forward(ids, counts, cache.rows(self.first, self.stop), all_logits)
        token_map = self.decoder.token_map
        return logits if token_map is None else logits.index_select(-1, token_map)


def span_caches(run: BatchRun, first: int, stop: int) -> dict:
    """The run's caches as views of the span's slots (lengths shared)."""
    return {name: cache.rows(first, stop) for name, cache in run.caches.items()}


def processor(rows: list[Row], state):
    """logits [S', ..., K] -> float32 laws, each slot under its request's sampling settings:
    one `process_logits` per group of settings, selected by the slots' group ids (device)."""
    groups = list(group_by_sampling(rows))
    if len(groups) == 1:
        return lambda logits: process_logits(logits, groups[0])

    def process(logits: torch.Tensor) -> torch.Tensor:
        probs = None
        for params in groups:
            law = process_logits(logits, params)
            mine = (state.group == state.groups[params]).view(-1, *[1] * (logits.dim() - 1))
            probs = law if probs is None else torch.where(mine, law, probs)
        return probs

    return process
