"""lm-eval's task for one of ours, built straight from its YAML: no scan of lm-eval's task
index, and documents processed once per dataset (so GPQA's shuffled choices stay put)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import datasets
from lm_eval.api.task import Task
from lm_eval.tasks import TaskManager
from lm_eval.tasks._yaml_loader import load_yaml

from cactus_bench.tasks.data import TaskDataError, missing_data_message
from cactus_bench.tasks.specs import TaskSpec


@functools.cache
def empty_task_manager() -> TaskManager:
    """A TaskManager that indexes nothing: tasks are loaded from their own config, which skips
    the ~10 s scan of lm-eval's thousands of task YAMLs."""
    return TaskManager(include_defaults=False)


def load_task(spec: TaskSpec, yaml_path: Path, folder: Path | None) -> Task:
    """Builds the lm-eval task from its YAML; its documents are processed only once."""
    config = load_yaml(yaml_path)  # lm-eval's own loader: `include` merged, functions imported
    if config.get("process_docs") is not None:
        config["process_docs"] = process_docs_once(config["process_docs"])
    caching = datasets.is_caching_enabled()
    datasets.disable_caching()  # a cached map would replay an earlier run's GPQA shuffle
    try:
        loaded = empty_task_manager().load([config])
    except OSError as err:  # no network, gated dataset, missing file: datasets raises OSErrors
        raise TaskDataError(missing_data_message(spec.name, folder, type(err).__name__)) from err
    finally:
        if caching:
            datasets.enable_caching()
    (lm_task,) = loaded["tasks"].values()
    return lm_task


def process_docs_once(process):
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
