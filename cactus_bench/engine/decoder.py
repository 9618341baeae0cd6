"""The request loop shared by the speculative and the autoregressive decoder.

Both keep the same cache layout: the verifier's cache holds every token but the last one, which
is "pending" and goes into the next forward. Prefill therefore covers prompt[:-1], and each step
feeds the pending token (plus drafts), so a step never re-processes the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from cactus_bench.engine import batched
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.cuda_graphs import GraphedRunner
from cactus_bench.engine.draws import uniforms
from cactus_bench.engine.fast_runner import FastRunner, unsupported_reason
from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.requests import Request, as_request, check_batch
from cactus_bench.engine.runtime import Clock, resolve_eos_ids
from cactus_bench.engine.sampling import BAD_LAW, SamplingParams, bad_rows, draw_tokens
from cactus_bench.engine.slot_state import SlotState
from cactus_bench.engine.step_graphs import StepGraphs
from cactus_bench.engine.stopping import OutputTracker


@runtime_checkable
class Decoder(Protocol):
    """What every backend's decoder implements (this engine's two, cactus_bench.vllm's): one
    request in, one RequestRecord out; or many, `batch` decoded at once, one record each in
    request order. The task loop and the run measure any Decoder alike."""

    num_draft_tokens: int  # m; 0 for the verifier alone
    sampler_name: str | None

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        stop: list[str] | None = None,
        seed: int | None = None,
        sampling: SamplingParams | None = None,
    ) -> RequestRecord: ...

    def generate_batch(self, requests, batch: int = 1, on_finish=None) -> list[RequestRecord]: ...


@dataclass
class DecodeState:
    """Per-request mutable state (caches, pending tokens, RNG, bookkeeping)."""

    params: SamplingParams
    seed: torch.Tensor  # [1] int64 on the device: the key of the request's draws (draws.py)
    record: RequestRecord
    clock: Clock
    seq_len: int  # tokens in the sequence so far (prompt + emitted)
    capacity: int = 0  # the most positions a cache may need (static caches preallocate it)
    caches: dict[str, Any] = field(default_factory=dict)
    pending: dict[str, torch.Tensor] = field(default_factory=dict)  # [1, n] ids not yet cached
    guards: Any = None  # (answer offset [1], inside <think> [1]) on the device: guards.relax_mask

    def uniforms(self, stream: int, offsets: int | torch.Tensor = 0) -> torch.Tensor:
        """[1] (int offset) or [1, k] (offsets [k]) float64 uniforms of this request at
        positions seq_len + offsets: the batched steps' draws (draws.py), so batch 1 and batch
        B decode the same tokens."""
        if isinstance(offsets, int):
            return uniforms(self.seed, self.seed.new_tensor([self.seq_len + offsets]), stream)
        return uniforms(self.seed, (self.seq_len + offsets)[None], stream)

    def draw(self, probs: torch.Tensor, stream: int, offset: int, greedy: bool) -> torch.Tensor:
        """[1, V] -> [1, 1] a token drawn as the batched steps draw it (`draw_tokens`); the same
        refusal as `sample_token` for a law that cannot be sampled."""
        if bool(bad_rows(probs).any()):
            raise ValueError(BAD_LAW)
        is_greedy = torch.tensor([greedy], device=probs.device)
        return draw_tokens(probs, self.uniforms(stream, offset), is_greedy)[:, None]


class BaseDecoder:
    """Subclasses implement `_start` (prefill) and `_step` (emit 1..remaining tokens)."""

    num_draft_tokens = 0
    sampler_name: str | None = None
    cuda_graphs = False  # batched forwards as CUDA graphs (cuda_graphs.resolve_cuda_graphs)
    graph_capture_s = 0.0  # seconds the last generate_batch spent capturing them
    step_log: list = []  # the last generate_batch's steps (batched.BatchStep); set per run
    last_device_stats: dict | None = None  # the last batched run's counters (device_stats)

    def __init__(
        self, tokenizer, sampling: SamplingParams | None, eos_token_ids, device, eos_model=None
    ):
        self.tokenizer = tokenizer
        self.sampling = sampling if sampling is not None else SamplingParams()
        if not isinstance(self.sampling, SamplingParams):
            raise ValueError("sampling must be a SamplingParams, e.g. SamplingParams(0.6, 0.95)")
        self.device = torch.device(device)
        self.eos_token_ids = resolve_eos_ids(tokenizer, eos_model, eos_token_ids)

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        stop: list[str] | None = None,
        seed: int | None = None,
        sampling: SamplingParams | None = None,
    ) -> RequestRecord:
        """Decodes one request (batch size 1). The same seed gives the same tokens."""
        request = Request.make(self, prompt_ids, max_new_tokens, stop, seed, sampling)
        if self.cuda_graphs:  # the batched engine's captured forwards, on one slot
            return self.generate_batch([request], batch=1)[0]
        prompt_ids, params = request.prompt_ids, request.sampling
        seed = torch.tensor([request.seed], device=self.device)
        record = RequestRecord(
            prompt_ids=list(prompt_ids),
            num_draft_tokens=self.num_draft_tokens,
            seed=request.seed,
            sampler_name=self.sampler_name_for(params),
            sampling=params.to_dict(),
        )
        tracker = OutputTracker(self.tokenizer, self.eos_token_ids, request.stop, max_new_tokens)
        capacity = len(prompt_ids) + max_new_tokens + 2 * (self.num_draft_tokens + 1)
        with torch.inference_mode():
            self._warm_runners(capacity)  # compiles (once per cache size) outside the clock
        clock = Clock(self.device)
        start = clock()
        state = DecodeState(params, seed, record, clock, len(prompt_ids), capacity)
        with torch.inference_mode():
            self._start(state, prompt_ids)
            record.prefill_time_s = clock() - start
            while not tracker.done:
                tracker.extend(self._step(state, tracker.remaining))
        record.output_ids, record.text, record.stop_reason = tracker.finish()
        record.total_time_s = record.finished_s = record.share_time_s = clock() - start
        return record

    def generate_batch(self, requests, batch: int = 1, on_finish=None) -> list[RequestRecord]:
        """Decodes many requests, `batch` at a time with continuous batching (a finished
        request's slot takes the next queued one); records in request order. Each request is a
        `requests.BatchRequest` or a dict of `generate`'s keywords; a request's seed gives the
        draws it gets from `generate`. `on_finish(index, record)` is called as each request
        ends. `step_log` then holds the run's steps (engine/batched.py).
        Batch > 1 needs the fast forward for every model (`batch_runners`); batch 1 without it
        runs the requests one after the other through `generate`."""
        check_batch(batch)
        if batch == 1 and self._batch_refusal() is not None:
            return self._generate_each(requests, on_finish)
        return batched.generate_batch(self, requests, batch, on_finish)

    def device_stats(self) -> dict:
        """The last batched run's counters (`batched.device_stats`): graph_replays (int),
        eager_forwards (int), capture_failed (bool), phase_ms ({draft, verify, rule, other}:
        mean ms per decode step; CUDA events on a GPU, perf_counter on a CPU; rule None where the
        rule ran inside the verify graph). Zeros and an empty phase_ms before any batched run
        (a batch-1 run on HF's forward has none)."""
        if self.last_device_stats is None:
            return {
                "graph_replays": 0,
                "eager_forwards": 0,
                "capture_failed": False,
                "phase_ms": {},
            }
        return dict(self.last_device_stats)

    def slot_state(self, batch: int) -> SlotState:
        """The per-slot device state of a batched run (slot_state.py), reset; kept for the
        decoder's life under CUDA graphs, whose captured draft loops read its buffers."""
        kept = getattr(self, "_slot_state", None)
        if not self.cuda_graphs or kept is None or kept.keys.shape[0] != batch:
            kept = SlotState(batch, self.device)
            self._slot_state = kept if self.cuda_graphs else None
        kept.reset()
        return kept

    def step_graphs(self, caches: dict, slots: SlotState) -> StepGraphs | None:
        """The captured step functions (step_graphs.py) of a speculative decoder under CUDA
        graphs, bound to this run's caches and slot state; None without a drafter."""
        if not self.cuda_graphs or "drafter" not in caches:
            return None
        graphs = getattr(self, "_step_graphs", None)
        if graphs is None:
            graphs = self._step_graphs = StepGraphs(self.device)
        graphs.bind(caches["drafter"], caches["verifier"], slots)
        return graphs

    def batch_runners(self, batch: int) -> dict:
        """{model name: `BatchRunner`} for a batched run; a clear error where one cannot run."""
        refusal = self._batch_refusal()
        if refusal is not None:
            raise ValueError(
                f"batch={batch} needs the fast forward (Llama, Qwen2, Qwen3 causal "
                f"LMs on one device, fast='auto' or 'on'): {refusal}; use batch=1"
            )
        if getattr(self, "_batch_runner_cache", None) is None:  # kept: their graphs persist
            self._batch_runner_cache = {
                name: BatchRunner(runner) for name, runner in self._named_runners().items()
            }
        return self._batch_runner_cache

    def graphed_runners(self, runners: dict) -> dict | None:
        """{model name: `GraphedRunner`} over `runners` when forwards run as CUDA graphs
        (`cuda_graphs`), kept for the decoder's life so captures are reused; else None."""
        if not self.cuda_graphs:
            return None
        graphs = getattr(self, "_graph_cache", None)
        if graphs is None or any(graphs[name].runner is not runners[name] for name in runners):
            graphs = self._graph_cache = {name: GraphedRunner(r) for name, r in runners.items()}
        return graphs

    def graph_sizes(self) -> dict[str, list[tuple[int, bool]]]:
        """{model name: [(new tokens n, all_logits)]}: the forward shapes a batched step runs."""
        raise NotImplementedError

    def _batch_refusal(self) -> str | None:
        """Why this decoder cannot run batched forwards, or None."""
        for name, runner in self._named_runners().items():
            if not isinstance(runner, FastRunner):
                reason = unsupported_reason(runner.model) or "fast='off' was asked for"
                return f"the {name} ({type(runner.model).__name__}) runs HF's forward: {reason}"
        return None

    def _generate_each(self, requests, on_finish=None) -> list[RequestRecord]:
        """Batch 1 on HF's forward: `generate` per request, start and end times on one clock."""
        clock = Clock(self.device)
        origin, records = clock(), []
        self.step_log = []
        for request in (as_request(self, request) for request in requests):
            started = clock() - origin
            record = self.generate(
                request.prompt_ids,
                request.max_new_tokens,
                request.stop,
                request.seed,
                request.sampling,
            )
            record.started_s, record.finished_s = started, started + record.total_time_s
            records.append(record)
            if on_finish is not None:
                on_finish(len(records) - 1, record)
        return records

    def _named_runners(self) -> dict:
        """{"drafter": ..., "verifier": ...} (drafter first), or {"verifier": ...}."""
        raise NotImplementedError

    def batch_step(self, run: batched.BatchRun, rows: list[batched.Row]) -> list[list[int]]:
        """One decode step over the rows of a batched run (engine/batch_steps.py): the tokens
        each row emitted."""
        raise NotImplementedError

    def runners(self) -> list:
        """The model runners (drafter first), for warm-up and inspection."""
        raise NotImplementedError

    def warmup(self, max_context: int = 0) -> float:
        """Compiles (where compiled) every forward shape a request will use, for caches of
        `max_context` positions (prompt + new tokens; 0: the smallest). `generate` does this
        itself before starting its clock, so no compile lands inside a timed request; calling
        it first only moves (and measures) the compile. Returns the seconds it took."""
        clock = Clock(self.device)
        start = clock()
        with torch.inference_mode():
            self._warm_runners(max_context + 2 * (self.num_draft_tokens + 1))
        return clock() - start

    def _warm_runners(self, capacity: int) -> None:
        for runner in self.runners():
            if hasattr(runner, "warmup"):
                runner.warmup(capacity)

    def sampler_name_for(self, params: SamplingParams) -> str | None:
        """The rule a request with these settings is decoded by (its record's sampler_name)."""
        return self.sampler_name

    def _start(self, state: DecodeState, prompt_ids: list[int]) -> None:
        raise NotImplementedError

    def _step(self, state: DecodeState, remaining: int) -> list[int]:
        raise NotImplementedError
