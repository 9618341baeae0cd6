"""`evaluate_task`: one task, scored by lm-eval, decoded by a cactus-bench decoder.

    res = evaluate_task("gsm8k", decoder=dec, baseline=base, tokenizer=tok, limit=10)
    res.score, res.metrics, res.records, res.baseline_records

Steps: pick the task's data source (hub or offline folder), seed as the reference does, build
lm-eval's task, apply the paper's settings (paper_settings.py), then run lm-eval's
`simple_evaluate` with chat templates on and collect its metrics and the engine's records.
With repeats = k the same prompts are decoded and scored k times, each time with other sampling
seeds (see `repeat_seed`), and the headline metric is averaged per prompt.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import langdetect
import lm_eval
from lm_eval.api.task import Task

from cactus_bench.engine import RequestRecord
from cactus_bench.paper import PAPER
from cactus_bench.tasks.data import (
    ensure_punkt,
    reset_gpqa_password,
    resolve_data_dir,
    set_gpqa_password,
    task_yaml_path,
)
from cactus_bench.tasks.lm import SUPPORTED_GEN_KWARGS, CactusBenchLM
from cactus_bench.tasks.lm_eval_task import empty_task_manager, load_task
from cactus_bench.tasks.paper_settings import apply_paper_settings
from cactus_bench.tasks.samples import scores_by_prompt, slim_sample
from cactus_bench.tasks.specs import (
    DEFAULT_MAX_GEN_TOKS,
    PAPER_GEN_KWARGS,
    THINK_FILTERS,
    TaskSpec,
    get_spec,
)

IFEVAL_SCORED = ("ifeval", "demo")  # tasks whose checkers need NLTK punkt
REFERENCE_SEED = PAPER.seed  # the reference's numpy / torch / few-shot seed; `random` gets 0
REPEAT_SEED_STRIDE = 2**20  # repeat r decodes with run seed + r * stride (see repeat_seed)


@dataclass
class TaskResult:
    """What one task run gives: lm-eval's metrics and the engine's per-request records.

    metrics: lm-eval's keys ("metric,filter", e.g. "exact_match,strict-match"), values as lm-eval
    reports them (fractions in [0, 1]; stderr entries included when numeric). records and
    baseline_records are in request order; baseline_records is empty without a baseline.
    samples: lm-eval's per-document log, slimmed to doc_id, filter, target, filtered response
    and metric values (no prompt or document text), plus the repeat it belongs to.
    repeats: decodes per prompt. records (and baseline_records) then hold repeat after repeat of
    the n_samples prompts, record i belonging to prompt i % n_samples; metrics are the means over
    repeats (lm-eval's stderr entries are left out when repeats > 1: they describe one repeat).
    scores_by_prompt: the headline metric per prompt in document order, averaged over repeats.
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
    repeats: int = 1
    scores_by_prompt: list[float] = field(default_factory=list)
    step_logs: dict[str, list] = field(default_factory=dict)  # batch > 1: arm -> BatchSteps


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


def repeat_seed(seed: int, repeat: int) -> int:
    """The decoding seed of repeat `repeat` (0 keeps the run seed, so repeats=1 is unchanged).

    Request i of a repeat samples with request_seed(seed + r * 2**20, i) = (seed * 1000003 +
    r * 2**20 * 1000003 + i) mod 2**31; as 1000003 is odd, the repeats' offsets are distinct
    multiples of 2**20 for up to 2048 repeats, so no two requests of a run share a seed for up
    to 2**20 prompts. lm-eval's own seeds (few-shot, GPQA's shuffle) stay the run seed's, so
    every repeat sees the same prompts.
    """
    return seed + repeat * REPEAT_SEED_STRIDE


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
    repeats: int = 1,
    think_filter: str = "paper",
    batch: int = 1,
) -> TaskResult:
    """Runs `task` (gsm8k | ifeval | gpqa | demo) through lm-eval with `decoder`.

    gen_kwargs: lm-eval generation kwargs (do_sample, temperature, top_p, top_k); None means the
    paper's (cactus_bench.paper). Given ones replace the paper's whole, so a key left out is off.
    max_gen_toks caps new tokens unless gen_kwargs sets its own.
    data_dir: offline data folder (else $CACTUS_BENCH_DATA, else the Hugging Face hub).
    gpqa_password: for the encrypted GPQA zip (else $CACTUS_BENCH_GPQA_PASSWORD, else the
    authors' published one).
    repeats: decode and score every prompt this many times, each with its own sampling seeds
    (the baseline decodes each repeat too, with the same seeds as the run's decoder).
    think_filter: "paper" (default) scores an unfinished `<think>` block's text with only the
    tag removed, as the reference code does; "strict" never scores unfinished reasoning
    (paper_settings.strip_thinking).
    batch: requests decoded at once by `decoder.generate_batch` (both arms; 1 = one at a time).
    """
    spec = get_spec(task)
    if tokenizer is None:
        raise ValueError("evaluate_task needs tokenizer= (the verifier's, with a chat template)")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1 or None for the whole task; got {limit!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0; got {seed!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1; got {repeats!r}")
    if think_filter not in THINK_FILTERS:
        raise ValueError(
            f"think_filter must be one of {', '.join(THINK_FILTERS)}; got {think_filter!r}"
        )
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
    lms = [  # one lm-eval model per repeat (it keeps that repeat's records); bad input fails here
        CactusBenchLM(
            decoder,
            tokenizer,
            baseline=baseline,
            chat_template_kwargs=chat_template_kwargs,
            max_gen_toks=int(generation["max_gen_toks"]),
            seed=repeat_seed(seed, repeat),
            show_progress=show_progress,
            batch=batch,
        )
        for repeat in range(repeats)
    ]

    password_token = set_gpqa_password(gpqa_password)
    try:
        # lm-eval's GPQA shuffles the answer choices with `random` while the task is built,
        # which happens here, before simple_evaluate seeds: seed it the same way first.
        random.seed(seeds["random_seed"])
        lm_task = load_task(spec, yaml_path, folder)
    finally:
        reset_gpqa_password(password_token)
    apply_paper_settings(lm_task, generation, think_filter)
    runs = []  # (lm-eval's results, the model that holds the records) per repeat
    for lm in lms:
        results = lm_eval.simple_evaluate(
            model=lm,
            tasks=[lm_task],
            task_manager=empty_task_manager(),
            limit=limit,
            apply_chat_template=True,
            fewshot_as_multiturn=False,  # the reference's evaluate(): few-shot in one user turn
            log_samples=True,
            **seeds,
        )
        runs.append((results, lm))
    return _task_result(spec, lm_task, runs, folder, generation, seeds)


def _task_result(
    spec: TaskSpec,
    lm_task: Task,
    runs: list[tuple[dict, CactusBenchLM]],
    folder: Path | None,
    generation: dict,
    seeds: dict,
) -> TaskResult:
    name = lm_task.task_name
    per_repeat = []  # the metrics of each repeat
    for results, _ in runs:
        raw = results["results"][name]
        metrics = {
            key: float(value)
            for key, value in raw.items()  # "metric,filter" keys only
            if "," in key and isinstance(value, int | float) and not isinstance(value, bool)
        }
        if spec.score_name not in metrics:
            raise RuntimeError(f"lm-eval reported no {spec.score_name!r} for {name}: {sorted(raw)}")
        per_repeat.append(metrics)
    metrics = per_repeat[0]
    if len(runs) > 1:
        shared = [k for k in metrics if "_stderr" not in k and all(k in m for m in per_repeat)]
        metrics = {k: sum(m[k] for m in per_repeat) / len(per_repeat) for k in shared}
    samples = [
        {**slim_sample(sample), "repeat": repeat}
        for repeat, (results, _) in enumerate(runs)
        for sample in results.get("samples", {}).get(name, [])
    ]
    first_results, _ = runs[0]
    return TaskResult(
        task=spec.name,
        lm_eval_task=name,
        metrics=metrics,
        score_name=spec.score_name,
        score=metrics[spec.score_name],
        n_samples=int(first_results["n-samples"][name]["effective"]),
        records=[record for _, lm in runs for record in lm.records],
        baseline_records=[record for _, lm in runs for record in lm.baseline_records],
        step_logs={
            arm: [step for _, lm in runs for step in lm.step_logs[arm]]
            for arm in ("spec", "baseline")
        },
        data_source="package" if spec.name == "demo" else str(folder) if folder else "hub",
        gen_kwargs=dict(lm_task.get_config("generation_kwargs")),
        seeds=dict(seeds),
        samples=samples,
        repeats=len(runs),
        scores_by_prompt=scores_by_prompt(samples, spec.score_name, len(runs)),
    )
