"""Many requests at once: B slots, continuous batching, one record per request (request order).

    from cactus_bench.engine import BatchRequest
    records = decoder.generate_batch(
        [BatchRequest(prompt_ids, max_new_tokens=256, stop=["\\n\\n"], seed=7), ...],
        batch=8,
    )
    decoder.step_log  # [BatchStep]: one per prefill and per decode step of the last run

A request is what `generate` takes (a `BatchRequest`, or a dict of generate's keywords); its
record is what `generate` would return for it, plus its wall-clock start and end within the run
(`started_s`, `finished_s`) and the batch size. The same seed gives the same random draws as at
batch 1: each request draws from its own generator, seeded as `generate` seeds it, in the same
order, so its tokens depend on its neighbours only through float rounding in the batched
products (equal in the tests' fp32 runs).

Scheduling: a queue in request order and B slots. Before each step every empty slot takes the
next queued request and prefills it (prompt[:-1] into that slot's rows of the batched caches,
`batch_cache.BatchRunner`); then one decode step runs over every occupied slot (the decoder's
`batch_step`: for the speculative decoder, m drafter forwards and ONE verifier forward over all
rows); a row that finishes (EOS, stop string, token budget: `OutputTracker`) frees its slot at
once, so throughput is not set by the longest request.

Timings: `share_time_s` is the request's share of the machine: each loop iteration's time (prefills,
the step, the scheduler) split evenly over the rows active in it, so the shares of a run sum to its
wall time, and generated tokens over summed shares is its throughput (at batch 1 the share is the
request's own time). `prefill_time_s` is the request's own prefill. A decode step's draft, verify
and rule times are added to the record of EVERY row active in it (each row waited for the whole
step), so at batch > 1 the phase times of the records sum to more than the wall time of the run;
`total_time_s` is the request's wall time from its prefill to its last token, neighbours' work
included. `step_log` keeps the per-step times once, with the rows and tokens they covered, for a
step-cost model."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import torch

from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.requests import Request, as_request
from cactus_bench.engine.runtime import Clock
from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.engine.slot_state import SlotState
from cactus_bench.engine.step_graphs import StepGraphs
from cactus_bench.engine.stopping import OutputTracker


@dataclass
class BatchStep:
    """One entry of a decoder's `step_log`. kind "prefill": one request's prompt pass into
    `slots[0]` (fed: prompt length - 1); kind "decode": one step over the occupied slots, fed[i]
    tokens of slot slots[i] through the verifier (pending + drafts; bonus steps 1), drafts[i]
    drafted and accepted[i] of them accepted. Times in seconds; start_s from the run's start."""

    kind: str
    start_s: float
    slots: list[int]
    requests: list[int]  # index of each slot's request in the run's request list
    fed: list[int]
    drafts: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.0
    rule_s: float = 0.0
    prefill_s: float = 0.0
    step_s: float = 0.0  # decode: the step's wall time, phases and host bookkeeping
    rule_in_verify: bool = False  # the rule ran in the verify graph: verify_s holds it, rule_s 0

    @property
    def rows(self) -> int:
        return len(self.slots)


@dataclass
class Row:
    """One request in a slot: what `DecodeState` is to `generate`, per row."""

    index: int  # position in the request list
    slot: int
    request: Request
    generator: torch.Generator
    record: RequestRecord
    tracker: OutputTracker
    seq_len: int  # prompt + emitted tokens so far
    pending: dict[str, list[int]] = field(default_factory=dict)  # ids not yet in each cache
    kept_drafter: int = 0  # the drafter's cache length after the last step's roll-back

    @property
    def params(self) -> SamplingParams:
        return self.request.sampling


@dataclass
class BatchRun:
    """What a decoder's `batch_step` works on: runners and caches by model name ("drafter",
    "verifier"), the slots' device state, the run's clock and its step log."""

    runners: dict
    caches: dict
    clock: Clock
    origin: float  # perf_counter() at the start of the run
    log: list[BatchStep]
    graphs: dict | None = None  # {model name: cuda_graphs.GraphedRunner} when captured
    graph_sizes: dict = field(default_factory=dict)  # {model name: [(n, all_logits)]}
    slots: SlotState | None = None
    step_graphs: StepGraphs | None = None  # captured step functions (graphs on, a drafter)
    forwards: int = 0  # batched forwards the steps ran (replayed or eager)
    replays: int = 0  # graphs the steps replayed (forwards and captured step functions)
    step_replays: int = 0  # of which captured step functions (their forwards are inside)
    unsettled: list = field(default_factory=list)  # (start mark, end mark, setter) to read

    def since(self, moment: float) -> float:
        return moment - self.origin

    def span(self, rows: list[Row]) -> tuple[int, int]:
        """The slots a step runs on: every slot under CUDA graphs (one captured shape), else
        the first to the last occupied one (an empty slot inside is fed nothing)."""
        if self.graphs is not None:
            return 0, self.caches["verifier"].lengths.shape[0]
        return rows[0].slot, rows[-1].slot + 1

    def settle(self) -> None:
        """Reads the marks queued since the last step's read (valid now: Clock)."""
        for start, end, setter in self.unsettled:
            setter(self.clock.seconds(start, end))
        self.unsettled.clear()

    def graph_width(self, name: str, width: int, all_logits: bool) -> int:
        """The smallest captured input width >= width (else width: that forward runs eagerly)."""
        sizes = sorted(n for n, every in self.graph_sizes.get(name, []) if every == all_logits)
        return next((n for n in sizes if n >= width), width)


def generate_batch(decoder, requests, batch: int, on_finish=None) -> list[RequestRecord]:
    """The decoder's `generate_batch` (module docstring), which checked `batch`; records in
    request order. `on_finish(index, record)` is called as each request ends (a journal keeps
    it at once)."""
    requests = [as_request(decoder, request) for request in requests]
    if not requests:
        return []
    batch = min(batch, len(requests))  # no more slots than requests
    # Positions a row may reach: its prompt, its budget, and a step's drafts plus padding.
    capacity = max(len(r.prompt_ids) + r.max_new_tokens for r in requests)
    capacity += 2 * (decoder.num_draft_tokens + 1)
    clock = Clock(decoder.device)
    with torch.inference_mode():
        runners = decoder.batch_runners(batch)  # raises where the architecture cannot batch
        graphs = decoder.graphed_runners(runners)
        keep = graphs is not None  # graphs are captured on the caches' buffers: keep them
        caches = {name: runner.new_cache(batch, capacity, keep) for name, runner in runners.items()}
        sizes = decoder.graph_sizes() if graphs is not None else {}
        # Every shape the steps will run, captured before the clock starts (once per cache).
        decoder.graph_capture_s = sum(
            graphs[name].capture(caches[name], sizes[name]) for name in (graphs or {})
        )
        # Under graphs a kept cache may be wider than this run's batch (a smaller final wave
        # reuses the full-width cache and graphs): the slot state spans all its rows.
        slots = decoder.slot_state(next(iter(caches.values())).lengths.shape[0] if keep else batch)
        run = BatchRun(runners, caches, clock, time.perf_counter(), [], graphs, sizes, slots)
        run.step_graphs = decoder.step_graphs(caches, slots)
        capture_s = run.step_graphs.capture_s if run.step_graphs is not None else 0.0
        replayed = _replays(graphs)
        decoder.step_log = run.log
        records: list[RequestRecord | None] = [None] * len(requests)
        queue = deque(enumerate(requests))
        occupied: list[Row | None] = [None] * batch
        while queue or any(occupied):
            began = time.perf_counter()
            for slot in range(batch):
                if occupied[slot] is None and queue:
                    occupied[slot] = _start_row(decoder, run, slot, *queue.popleft())
            rows = [row for row in occupied if row is not None]
            emitted_by_row = decoder.batch_step(run, rows)
            run.settle()  # the step read its result: the prefills' marks have run
            # The iteration's whole time (prefills, the step, the scheduler) split evenly over
            # its rows: each request's share of the machine; the shares sum to the run's time.
            # Wall time without a wait: the step's one read waited for the device.
            share = (time.perf_counter() - began) / len(rows)
            for row, emitted in zip(rows, emitted_by_row, strict=True):
                row.record.share_time_s += share
                row.tracker.extend(emitted)
                if row.tracker.done:
                    records[row.index] = _finish_row(decoder, run, row, batch)
                    occupied[row.slot] = None
                    slots.stop(row.slot)
                    for cache in caches.values():
                        cache.crop(row.slot, 0)  # an empty slot costs no (eager) attention
                    if on_finish is not None:
                        on_finish(row.index, records[row.index])
        run.replays += _replays(graphs) - replayed
        if run.step_graphs is not None:  # step functions captured during the run's steps
            decoder.graph_capture_s += run.step_graphs.capture_s - capture_s
    decoder.last_device_stats = device_stats(run)  # the counters only: the run's caches go
    return records


def _replays(graphs: dict | None) -> int:
    """Graph replays the runners made over their lives (cuda_graphs.GraphedRunner.replays)."""
    return sum(getattr(runner, "replays", 0) for runner in (graphs or {}).values())


def device_stats(run: BatchRun) -> dict:
    """Per-run counters of a batched run (the decoders' `device_stats`): graph_replays,
    eager_forwards (forwards that ran eagerly: graphs off, a shape not captured, a failed
    capture), capture_failed, and phase_ms: mean milliseconds per decode step of its draft,
    verify and rule phases (CUDA events on a GPU, perf_counter on a CPU) and of the rest of the
    step ("other": host bookkeeping and the read). Where a step's rule ran inside its verify
    graph (step_graphs.py), "verify" holds it and "rule" is None: no event splits a graph."""
    steps = [step for step in run.log if step.kind == "decode"]
    count = max(len(steps), 1)

    def mean_ms(seconds) -> float:
        return 1000.0 * sum(seconds) / count

    forward_replays = run.replays - run.step_replays
    rule_in_verify = any(step.rule_in_verify for step in steps)
    return {
        "graph_replays": run.replays,
        "eager_forwards": run.forwards - forward_replays,
        "capture_failed": any(
            r.failed is not None for r in [*(run.graphs or {}).values(), run.step_graphs] if r
        ),
        "phase_ms": {
            "draft": mean_ms(s.draft_s for s in steps),
            "verify": mean_ms(s.verify_s for s in steps),
            "rule": None if rule_in_verify else mean_ms(s.rule_s for s in steps),
            "other": mean_ms(s.step_s - s.draft_s - s.verify_s - s.rule_s for s in steps),
        },
    }


def _start_row(decoder, run: BatchRun, slot: int, index: int, request: Request) -> Row:
    params = request.sampling
    record = RequestRecord(
        prompt_ids=list(request.prompt_ids),
        num_draft_tokens=decoder.num_draft_tokens,
        seed=request.seed,
        sampler_name=decoder.sampler_name_for(params),
        sampling=params.to_dict(),
    )
    tracker = OutputTracker(
        decoder.tokenizer, decoder.eos_token_ids, request.stop, request.max_new_tokens
    )
    row = Row(
        index=index,
        slot=slot,
        request=request,
        generator=torch.Generator(device=decoder.device).manual_seed(request.seed),
        record=record,
        tracker=tracker,
        seq_len=len(request.prompt_ids),
    )
    started, start = time.perf_counter(), run.clock.mark()
    for name, runner in run.runners.items():
        runner.prefill(run.caches[name], slot, request.prompt_ids[:-1])
        row.pending[name] = request.prompt_ids[-1:]
    prompt, budget = request.prompt_ids, request.max_new_tokens
    think_ids = getattr(decoder, "think_ids", None)  # relax_in = think: the prompt's state
    inside = think_ids is not None and think_ids.inside_after(prompt)
    run.slots.start(slot, request.seed, params, len(prompt), budget, prompt[-1], inside)
    record.started_s = run.since(started)
    fed = [len(request.prompt_ids) - 1]
    step = BatchStep("prefill", run.since(started), [slot], [index], fed)
    run.log.append(step)

    def prefilled(seconds: float) -> None:
        record.prefill_time_s = step.prefill_s = seconds

    run.unsettled.append((start, run.clock.mark(), prefilled))
    return row


def _finish_row(decoder, run: BatchRun, row: Row, batch: int) -> RequestRecord:
    record = row.record
    record.output_ids, record.text, record.stop_reason = row.tracker.finish()
    record.finished_s = run.since(time.perf_counter())
    record.total_time_s = record.finished_s - record.started_s
    record.batch_size = batch
    return record


def record_step(run: BatchRun, rows: list[Row], step: BatchStep) -> None:
    """Appends a decode step to the log and adds its times to every row active in it."""
    run.log.append(step)
    for row in rows:
        row.record.draft_time_s += step.draft_s
        row.record.verify_time_s += step.verify_s
        row.record.sampler_time_s += step.rule_s


def group_by_sampling(rows: list[Row]) -> dict[SamplingParams, list[int]]:
    """Row positions grouped by their sampling settings, so each group's logits are processed
    in one `process_logits` call (rows of a group share temperature, top-k and top-p)."""
    groups: dict[SamplingParams, list[int]] = {}
    for position, row in enumerate(rows):
        groups.setdefault(row.params, []).append(position)
    return groups
