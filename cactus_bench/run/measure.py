"""Measuring one run: decode the task with the backend's decoders (and the verifier-only
baseline), then summarise the records into the row's measured columns.

The order inside a run: seed torch, pin threads, load the decoders, warm every decoder up, decode
the task (the baseline interleaved wave by wave, or from the baseline cache), summarise.
Every request is journaled as it ends, and a rerun replays the journal (`decode_journaled`).
The row also gets the machine's state around each arm and the arms' drift (store/drift.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cactus_bench.run.backends import Decoders, load_decoders
from cactus_bench.run.baseline import baseline_journal, cached_baseline, sweep_lock
from cactus_bench.run.conf import RunConf
from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.launch import resolve_path
from cactus_bench.run.resume import JournaledDecoder, report, run_journal
from cactus_bench.store import summarise
from cactus_bench.store.drift import drift_columns
from cactus_bench.store.intervals import per_prompt_columns
from cactus_bench.store.machine_state import cached_gap, gpu_state, load_columns

if TYPE_CHECKING:
    from cactus_bench.samplers.base import AcceptanceRule

WARM_UP_TEXT = "Warm-up: name three colours."
PHASE_TIME_COLUMNS = ("prefill_time_s", "draft_time_s", "verify_time_s", "sampler_time_s")


@dataclass
class Measured:
    row: dict[str, Any]  # task and speculation columns
    records: list  # RequestRecords of the run's decoder
    baseline_records: list | None  # of the verifier-only baseline (records or their dicts)
    step_logs: dict[str, list] = field(default_factory=dict)  # batch > 1: arm -> BatchSteps


def measure(identity: RunIdentity, rule: AcceptanceRule | None) -> Measured:
    """Load, warm up, decode and summarise; `rule` is None for the verifier alone."""
    import torch  # lazy: keeps torch out of `import cactus_bench.run` and the checks

    conf = identity.conf
    torch.manual_seed(conf.seed)
    if conf.threads is not None:
        torch.set_num_threads(conf.threads)
    decoders = load_decoders(identity, rule)
    warm_up([decoders.decoder, decoders.interleaved], decoders.tokenizer, batch=conf.batch)
    return evaluate_and_summarise(identity, decoders)


def evaluate_and_summarise(identity: RunIdentity, decoders: Decoders) -> Measured:
    """Decode the task (and its baseline), then summarise; the same for every backend."""
    from cactus_bench.tasks import evaluate_task  # lazy: keeps lm-eval and torch out, as above

    conf = identity.conf

    def evaluate(task_decoder, baseline):
        return evaluate_task(
            task=conf.task.name,
            decoder=task_decoder,
            baseline=baseline,
            tokenizer=decoders.tokenizer,
            chat_template_kwargs=decoders.chat_template_kwargs,
            data_dir=resolve_path(conf.data_dir),
            limit=conf.limit,
            seed=conf.seed,
            gen_kwargs=gen_kwargs(conf),
            max_gen_toks=conf.max_new_tokens,
            repeats=conf.repeats,
            think_filter=conf.think_filter,
            batch=conf.batch,
        )

    gpu_before = gpu_state(conf.device)
    result, load_at = decode_journaled(identity, decoders, evaluate)
    state = {"spec": load_at["spec"], "baseline": load_at["baseline"]}
    if gpu_before is not None:  # CUDA, seen by pynvml or nvidia-smi
        state["gpu"] = {"start": gpu_before, "end": gpu_state(conf.device)}
    baseline_records = list(result.baseline_records) if decoders.interleaved is not None else None
    gap = {}
    if conf.baseline == "cached":

        def decode_baseline(journal):
            verifier = JournaledDecoder(decoders.verifier_only(), journal, "baseline")
            return evaluate(verifier, None).records, verifier.load_at

        baseline_records, cached_state = cached_baseline(
            identity, result.records, decode_baseline, load_at["spec"]
        )
        if cached_state is not None:
            state["baseline"] = {k: cached_state[k] for k in ("start", "end")}
            state["cached_baseline"] = cached_state
            gap = cached_gap(load_at["spec"], cached_state)
    row = {
        "n_prompts": result.n_samples,
        "score_name": result.score_name,
        "score": result.score,
        "metrics_json": dict(result.metrics),
        **summarise(result.records, baseline_records),
        **per_prompt_columns(
            result.records,
            baseline_records,
            result.scores_by_prompt,
            conf.seed,
            result.n_samples,
            batch=conf.batch,
        ),
        **drift_columns(
            result.records, baseline_records, result.n_samples, conf.batch, conf.drift_threshold
        ),
        **load_columns(state["spec"], state["baseline"] if baseline_records else {}),
        "machine_state_json": state,
        **gap,
    }
    if not decoders.per_phase_times:  # empty cells, never a 0 the backend did not measure
        row.update(dict.fromkeys(PHASE_TIME_COLUMNS))
    return Measured(row, list(result.records), baseline_records, dict(result.step_logs))


def decode_journaled(identity: RunIdentity, decoders: Decoders, evaluate):
    """`evaluate(decoder, interleaved_baseline)` with every request journaled the moment it
    ends and a rerun's journaled requests replayed instead of decoded (run/resume.py); with
    each arm's load at its start and end ({"spec": {...}, "baseline": {...}})."""
    if identity.conf.baseline == "cached" and not identity.speculative:
        # This run's decode IS the sweep's verifier-only baseline: into the shared journal.
        with sweep_lock(identity):
            run_decoder = JournaledDecoder(decoders.decoder, baseline_journal(identity), "baseline")
            result = evaluate(run_decoder, None)
        interleaved = None
    else:
        journal = run_journal(identity)
        run_decoder = JournaledDecoder(decoders.decoder, journal, "spec")
        interleaved = None
        if decoders.interleaved is not None:
            interleaved = JournaledDecoder(decoders.interleaved, journal, "baseline")
        result = evaluate(run_decoder, interleaved)
    resumed = report([run_decoder, interleaved])
    if resumed:
        print(resumed, flush=True)
    load_at = {"spec": run_decoder.load_at, "baseline": interleaved.load_at if interleaved else {}}
    return result, load_at


def warm_up(decoders: list, tokenizer, new_tokens: int = 8, batch: int = 1) -> None:
    """Decode a few tokens with each decoder before anything is timed (at the run's batch).

    The first forwards of a model pay one-off costs (allocations, kernel selection, lazy
    initialisation) that would otherwise land on whichever arm decodes the first prompt, or on a
    cached baseline decoded by the first job of a sweep. Spec-Bench warms up likewise.
    """
    prompt_ids = tokenizer.encode(WARM_UP_TEXT)
    for decoder in decoders:
        if decoder is None:
            continue
        decoder.generate(prompt_ids, max_new_tokens=new_tokens, seed=0)
        if batch > 1:  # the batched forwards' shapes too
            requests = [
                {"prompt_ids": prompt_ids, "max_new_tokens": new_tokens, "seed": s}
                for s in range(batch)
            ]
            decoder.generate_batch(requests, batch)


def gen_kwargs(conf: RunConf) -> dict[str, Any]:
    """lm-eval generation kwargs matching the run's sampling (temperature 0 = greedy)."""
    if conf.temperature == 0:
        return {"do_sample": False, "temperature": 0.0}
    kwargs = {"do_sample": True, "temperature": conf.temperature, "top_p": conf.top_p}
    if conf.top_k:
        kwargs["top_k"] = conf.top_k
    return kwargs
