"""`evaluate_task`: one task, scored by lm-eval, decoded by a cactus-bench decoder.

    res = evaluate_task("gsm8k", decoder=dec, baseline=base, tokenizer=tok, limit=10)
    res.score, res.metrics, res.records, res.baseline_records

Steps: pick the task's data source (hub or offline folder), seed as the reference does, build
lm-eval's task, apply the paper's settings (paper_settings.py), then run lm-eval's
`simple_evaluate` with chat templates on and collect its metrics and the engine's records.
"""

from __future__ import annotations

import functools
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
import langdetect
import lm_eval
from lm_eval.api.task import Task
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml

from cactus_bench.engine import RequestRecord
from cactus_bench.tasks.data import (
    TaskDataError,
    ensure_punkt,
    missing_data_message,
    reset_gpqa_password,
    resolve_data_dir,
    set_gpqa_password,
    task_yaml_path,
)
from cactus_bench.tasks.lm import SUPPORTED_GEN_KWARGS, CactusBenchLM
from cactus_bench.tasks.paper_settings import apply_paper_settings
from cactus_bench.tasks.specs import DEFAULT_MAX_GEN_TOKS, PAPER_GEN_KWARGS, TaskSpec, get_spec

IFEVAL_SCORED = ("ifeval", "demo")  # tasks whose checkers need NLTK punkt
REFERENCE_SEED = 1234  # the reference's numpy / torch / few-shot seed; its `random` seed is 0


@dataclass
class TaskResult:
    """What one task run gives: lm-eval's metrics and the engine's per-request records.

    metrics: lm-eval's keys ("metric,filter", e.g. "exact_match,strict-match"), values as lm-eval
    reports them (fractions in [0, 1]; stderr entries included when numeric). records and
    baseline_records are in request order; baseline_records is empty without a baseline.
    samples: lm-eval's per-document log, slimmed to doc_id, filter, target, filtered response
    and metric values (no prompt or document text).
    """

    task: str
    lm_eval_task: str
    metrics: dict[str, float]
    score_name: str
    score: float
    n_samples: int
    records: list[RequestRecord] = field(default_factory=list)
    baseline_records: list[RequestRecord] = field(default_factory=list)
    data_source: str = "hub"  # "hub", "package" (demo) or the data folder
    gen_kwargs: dict[str, Any] = field(default_factory=dict)
    seeds: dict[str, int] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)


def lm_eval_seeds(seed: int) -> dict[str, int]:
    """simple_evaluate's four seeds for a run seed.

    At the default seed 1234 these are the reference's: random 0, numpy / torch / few-shot 1234.
    Python's `random` is what lm-eval's GPQA uses to shuffle the choices, so its seed moves with
    the run seed too (offset so that 1234 maps to 0, and distinct run seeds stay distinct).
    """
    return {
        "random_seed": (seed - REFERENCE_SEED) % 2**32,
        "numpy_random_seed": seed,
        "torch_random_seed": seed,
        "fewshot_random_seed": seed,
    }


def evaluate_task(
    task: str,
    decoder,
    baseline=None,
    tokenizer=None,
    chat_template_kwargs: dict[str, Any] | None = None,
    data_dir: str | os.PathLike | None = None,
    limit: int | None = None,
    seed: int = REFERENCE_SEED,
    gen_kwargs: dict[str, Any] | None = None,
    max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
    gpqa_password: str | None = None,
    show_progress: bool = True,
) -> TaskResult:
    """Runs `task` (gsm8k | ifeval | gpqa | demo) through lm-eval with `decoder`.

    gen_kwargs: lm-eval generation kwargs (do_sample, temperature, top_p, top_k); None means the
    paper's (cactus_bench.paper). Given ones replace the paper's whole, so a key left out is off.
    max_gen_toks caps new tokens unless gen_kwargs sets its own.
    data_dir: offline data folder (else $CACTUS_BENCH_DATA, else the Hugging Face hub).
    gpqa_password: for the encrypted GPQA zip (else $CACTUS_BENCH_GPQA_PASSWORD, else the
    authors' published one).
    """
    spec = get_spec(task)
    if tokenizer is None:
        raise ValueError("evaluate_task needs tokenizer= (the verifier's, with a chat template)")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1 or None for the whole task; got {limit!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    generation = dict(PAPER_GEN_KWARGS if gen_kwargs is None else gen_kwargs)
    unknown = set(generation) - SUPPORTED_GEN_KWARGS
    if unknown:
        raise ValueError(
            f"unsupported gen_kwargs {sorted(unknown)}; use {sorted(SUPPORTED_GEN_KWARGS)}"
        )
    generation.setdefault("max_gen_toks", max_gen_toks)

    folder = resolve_data_dir(data_dir)
    if spec.name in IFEVAL_SCORED:
        ensure_punkt(folder)  # before lm-eval's IFEval module is imported (it downloads otherwise)
        # IFEval's language checks call langdetect, which samples unless seeded (its documented
        # switch for deterministic results), so the same responses always get the same score.
        langdetect.DetectorFactory.seed = 0
    yaml_path = task_yaml_path(spec, folder)
    seeds = lm_eval_seeds(seed)
    lm = CactusBenchLM(
        decoder,
        tokenizer,
        baseline=baseline,
        chat_template_kwargs=chat_template_kwargs,
        max_gen_toks=int(generation["max_gen_toks"]),
        seed=seed,
        show_progress=show_progress,
    )

    password_token = set_gpqa_password(gpqa_password)
    try:
        # lm-eval's GPQA shuffles the answer choices with `random` while the task is built,
        # which happens here, before simple_evaluate seeds: seed it the same way first.
        random.seed(seeds["random_seed"])
        lm_task = _load_task(spec, yaml_path, folder)
    finally:
        reset_gpqa_password(password_token)
    apply_paper_settings(lm_task, generation)
    results = lm_eval.simple_evaluate(
        model=lm,
        tasks=[lm_task],
        task_manager=_empty_task_manager(),
        limit=limit,
        apply_chat_template=True,
        fewshot_as_multiturn=False,  # the reference's evaluate(): few-shot in one user turn
        log_samples=True,
        **seeds,
    )
    return _task_result(spec, lm_task, results, lm, folder, generation, seeds)


@functools.cache
def _empty_task_manager() -> TaskManager:
    """A TaskManager that indexes nothing: tasks are loaded from their own config, which skips
    the ~10 s scan of lm-eval's thousands of task YAMLs."""
    return TaskManager(include_defaults=False)


def _load_task(spec: TaskSpec, yaml_path: Path, folder: Path | None) -> Task:
    """Builds the lm-eval task from its YAML; its documents are processed only once."""
    config = load_yaml(yaml_path)  # lm-eval's own loader: `include` merged, functions imported
    if config.get("process_docs") is not None:
        config["process_docs"] = _process_docs_once(config["process_docs"])
    caching = datasets.is_caching_enabled()
    datasets.disable_caching()  # a cached map would replay an earlier run's GPQA shuffle
    try:
        loaded = _empty_task_manager().load([config])
    except OSError as err:  # no network, gated dataset, missing file: datasets raises OSErrors
        raise TaskDataError(missing_data_message(spec.name, folder, type(err).__name__)) from err
    finally:
        if caching:
            datasets.enable_caching()
    (lm_task,) = loaded["tasks"].values()
    return lm_task


def _process_docs_once(process):
    """process_docs that runs once per dataset and then returns that first result.

    lm-eval re-runs a task's process_docs each time it reads the documents (building the task,
    the prompts, then once per filter when scoring). GPQA's shuffles the answer choices with
    `random`, so without a datasets cache replaying the first result the prompts and the gold
    letters would come from different shuffles. As with the reference's fresh cache, the first
    shuffle after seeding is the one used throughout.
    """
    results: dict[int, tuple[Any, Any]] = {}  # id(dataset) -> (dataset kept alive, processed)

    def once(dataset):
        if id(dataset) not in results:
            results[id(dataset)] = (dataset, process(dataset))
        return results[id(dataset)][1]

    return once


def _task_result(
    spec: TaskSpec,
    lm_task: Task,
    results: dict,
    lm: CactusBenchLM,
    folder: Path | None,
    generation: dict,
    seeds: dict,
) -> TaskResult:
    name = lm_task.task_name
    raw = results["results"][name]
    metrics = {
        key: float(value)
        for key, value in raw.items()  # "metric,filter" keys only
        if "," in key and isinstance(value, int | float) and not isinstance(value, bool)
    }
    if spec.score_name not in metrics:
        raise RuntimeError(f"lm-eval reported no {spec.score_name!r} for {name}: {sorted(raw)}")
    return TaskResult(
        task=spec.name,
        lm_eval_task=name,
        metrics=metrics,
        score_name=spec.score_name,
        score=metrics[spec.score_name],
        n_samples=int(results["n-samples"][name]["effective"]),
        records=list(lm.records),
        baseline_records=list(lm.baseline_records),
        data_source="package" if spec.name == "demo" else str(folder) if folder else "hub",
        gen_kwargs=dict(lm_task.get_config("generation_kwargs")),
        seeds=dict(seeds),
        samples=[_slim_sample(sample) for sample in results.get("samples", {}).get(name, [])],
    )


def _slim_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """A logged lm-eval sample without the document and prompt (GPQA must not leak as text)."""
    slim = {
        key: sample[key]
        for key in ("doc_id", "filter", "target", "filtered_resps")
        if key in sample
    }
    metrics = [metric for metric in sample.get("metrics", []) if metric in sample]
    slim.update({metric: sample[metric] for metric in metrics})
    return _plain(slim)


def _plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars become Python numbers, containers are copied."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalar
        return value.item()
    return value
