"""backend=vllm: the paper's timing engine, one request at a time like Spec-Bench, or many at
once with vLLM's own continuous batching.

    from cactus_bench.vllm.decoder import VllmDecoder
    llm = cactus_bench.vllm.engines.build_llm(...)  # a speculative or verifier-only engine
    dec = VllmDecoder(llm, tokenizer, num_draft_tokens=10, sampler_name="cactus", sampling=sp)
    rec = dec.generate(prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None)
    recs = dec.generate_batch([{"prompt_ids": ids, "max_new_tokens": 96, "seed": 1}, ...], 8)

vLLM is imported only inside functions, so this module imports (and is tested) on CPU.

What is measured, and how (never invented):
- The acceptance rule runs inside vLLM through `cactus_bench.vllm.acceptance` (the
  `vllm.general_plugins` entry point reads CACTUS_BENCH_VLLM_RULE, set by `engines.build_llm`
  before vLLM starts its worker processes).
- The per-step counts are vLLM's per-request spec-decode metrics
  (`per_request_spec_decode_metrics="detailed"`, vLLM >= 0.32): each finished output carries
  `spec_decode_metrics.per_step_drafted` / `per_step_accepted`, one entry per verification step in
  decode order. They belong to the request, so two engines in one process, or the order they
  were built in, change nothing (the process-wide Prometheus counters that an earlier version
  read were reset by every new engine). A speculative request that emitted tokens but carries
  no metrics raises rather than report an empty AL.
- `draft_probs_fallbacks`: verification steps of this request that went to vLLM's own sampler
  because vLLM passed no draft probabilities (near max_model_len; cactus_bench.vllm.acceptance),
  read from the workers' reports (cactus_bench.vllm.runner) around the request, with the drafts
  the rule's bridge verified and accepted (`rule_drafted`, `rule_accepted`:
  cactus_bench.vllm.working_set). Those must equal vLLM's own counts (less the fallback
  steps' drafts), else the run is refused in one line (outputs.check_rule_counts): a patch that
  sat inert for some steps would otherwise report vLLM's acceptance as the rule's.
- total_time_s is the wall time of `llm.generate`; vLLM does not expose per-phase times, so the
  runner writes the draft/verify/sampler/prefill columns as empty cells for this backend.
- `generate_batch` submits every request at once to an engine built for `batch` at once
  (run/backends/vllm.py) and steps vLLM's engine itself, as `llm.generate` does, so that it sees
  which requests each step advanced: a request's `share_time_s` is each step's time (with the
  loop's own work since the step before) split over the requests that step returned tokens for,
  so the shares sum to the run's wall time, as on the HF engine (engine/batched.py);
  `started_s` is the start of its first step (its prefill),
  `finished_s` the end of its last. The workers' counts are read as each request ends, so
  each record carries those since the previous request ended (their sum is the run's, and the
  rule's counts are checked against vLLM's on the run's totals); the reads are left off the
  clock (their seconds: `last_batch_reads_s`), and the submission counts with the first step.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable

from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.requests import Request, as_request, check_batch
from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.vllm.outputs import check_rule_counts, completion_record, sampling_kwargs
from cactus_bench.vllm.runner import REPORT_METHOD


# ---- the decoder ---------------------------------------------------------------------------------
class VllmDecoder:
    """The `Decoder` protocol on vLLM: `generate(...) -> RequestRecord` one request per call,
    `generate_batch(requests, batch)` every request submitted at once."""

    def __init__(
        self,
        llm,
        tokenizer,
        *,
        num_draft_tokens: int,
        sampler_name: str | None,
        sampling: SamplingParams | None = None,
        eos_token_ids: Iterable[int] | None = None,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.num_draft_tokens = int(num_draft_tokens)  # 0 for the verifier-only arm
        self.sampler_name = sampler_name if num_draft_tokens else None
        self.sampling = sampling if sampling is not None else SamplingParams()
        self.eos_token_ids = None if eos_token_ids is None else sorted(set(eos_token_ids))
        self.last_batch_reads_s = 0.0  # generate_batch's reads of the workers, off its clock
        # engines.build_llm marks its engines: the rule inside (its counts are checked against
        # vLLM's), and the vLLM release and line that passed the start-up conformance check
        self.rule_inside = getattr(llm, "cactus_rule", None) is not None and bool(num_draft_tokens)
        self.vllm_version = getattr(llm, "cactus_vllm", None)

    def vllm_sampling(self, params: SamplingParams, max_new_tokens: int, stop, seed: int):
        from vllm import (
            SamplingParams as VllmSamplingParams,  # lazy: vLLM is installed only in .venv-vllm
        )

        return VllmSamplingParams(
            **sampling_kwargs(params, max_new_tokens, stop, seed, self.eos_token_ids)
        )

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        stop: list[str] | None = None,
        seed: int | None = None,
        sampling: SamplingParams | None = None,
    ) -> RequestRecord:
        """One request through `llm.generate` (engine.decoder.Decoder); the same argument
        handling as the HF decoders (engine.requests.Request)."""
        request = Request.make(self, prompt_ids, max_new_tokens, stop, seed, sampling)
        params, stop = request.sampling, request.stop
        vllm_params = self.vllm_sampling(params, request.max_new_tokens, stop, request.seed)
        speculative = self.num_draft_tokens > 0
        before = worker_counts(self.llm) if speculative else None
        start = time.perf_counter()
        outputs = self.llm.generate(
            [{"prompt_token_ids": request.prompt_ids}], vllm_params, use_tqdm=False
        )
        total = time.perf_counter() - start
        completion = outputs[0].outputs[0]
        counts = _since(worker_counts(self.llm), before) if speculative else None
        record = completion_record(self, request, completion, total, counts)
        record.finished_s = record.share_time_s = total
        return record

    def generate_batch(self, requests, batch: int = 1, on_finish=None) -> list[RequestRecord]:
        """Every request submitted at once; the engine (built for `batch` requests) decodes up to
        that many together and starts a queued one as one ends. Records in request order;
        `on_finish(index, record)` as each request ends (module docstring: the timings)."""
        check_batch(batch)
        requests = [as_request(self, request) for request in requests]
        if batch == 1:  # one at a time, as the batch-1 rows were always measured
            records = []
            for index, request in enumerate(requests):
                record = self.generate(*_arguments(request))
                started = records[-1].finished_s if records else 0.0
                record.started_s, record.finished_s = started, started + record.total_time_s
                records.append(record)
                if on_finish is not None:
                    on_finish(index, record)
            return records
        from vllm.outputs import RequestOutput  # lazy: vLLM is installed only in .venv-vllm
        from vllm.sampling_params import RequestOutputKind  # lazy: as above

        engine, speculative = self.llm.llm_engine, self.num_draft_tokens > 0
        tag = f"cactus-batch-{next(_BATCHES)}-"
        paused = 0.0  # seconds spent reading the workers' reports, left off the clock
        origin = time.perf_counter()  # the submission counts with the first step

        def clock() -> float:
            return time.perf_counter() - origin - paused

        def read_counts() -> dict:
            """The workers' counts so far; their read is left off the clock."""
            nonlocal paused
            read = time.perf_counter()
            total = worker_counts(self.llm)
            paused += time.perf_counter() - read
            return total

        for index, request in enumerate(requests):
            params = self.vllm_sampling(
                request.sampling, request.max_new_tokens, request.stop, request.seed
            )
            params.output_kind = RequestOutputKind.CUMULATIVE  # every step's advanced requests
            engine.add_request(f"{tag}{index}", {"prompt_token_ids": request.prompt_ids}, params)
        records: list = [None] * len(requests)
        started: dict[int, float] = {}
        shares = [0.0] * len(requests)
        seen = first = read_counts() if speculative else None
        last = carried = 0.0  # the end of the previous step; time of steps that advanced none
        while engine.has_unfinished_requests():
            begun = clock()
            advanced = [o for o in engine.step() if isinstance(o, RequestOutput)]
            now = clock()
            # the loop's own work since the previous step counts with this one, so the shares
            # sum to the run's wall time
            spent, last = carried + now - last, now
            carried = 0.0 if advanced else spent
            for output in advanced:
                index = int(output.request_id.removeprefix(tag))
                started.setdefault(index, begun)
                shares[index] += spent / len(advanced)
                if not output.finished:
                    continue
                counts = None
                if speculative:
                    total = read_counts()
                    counts, seen = _since(total, seen), total
                record = completion_record(
                    self, requests[index], output.outputs[0], now - started[index], counts, False
                )
                record.started_s, record.finished_s = started[index], now
                record.share_time_s, record.batch_size = shares[index], batch
                records[index] = record
                if on_finish is not None:
                    on_finish(index, record)
        self.last_batch_reads_s = paused
        if speculative and self.rule_inside:  # the run's totals (a request's share is not exact)
            drafted = sum(sum(r.drafted_per_step) for r in records)
            accepted = sum(sum(r.accepted_per_step) for r in records)
            check_rule_counts(drafted, accepted, _since(seen, first), f"{len(records)} requests")
        return records


_BATCHES = itertools.count()  # request ids stay unique across the batches of one engine


def _arguments(request: Request) -> tuple:
    return (
        request.prompt_ids,
        request.max_new_tokens,
        request.stop,
        request.seed,
        request.sampling,
    )


COUNTS = ("draft_probs_fallbacks", "fallback_drafts", "rule_drafted", "rule_accepted")


def worker_counts(llm) -> dict[str, int]:
    """The workers' counts so far (runner.worker_report), summed over the engine's workers:
    steps and drafts given to vLLM's own sampler, drafts the rule's bridge verified and
    accepted."""
    reports = llm.collective_rpc(REPORT_METHOD)
    return {key: sum(int(r.get(key, 0)) for r in reports) for key in COUNTS}


def _since(now: dict, before: dict) -> dict:
    return {key: now[key] - before[key] for key in COUNTS}
