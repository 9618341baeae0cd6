"""logger=wandb: mirror a finished row and its per-request records to Weights & Biases.

One W&B run per job, grouped by experiment (or by the results CSV a plain sweep appends to)
and tagged `pair:<name>`, `task:<name>`, `rule:<name>`. The CSV stays the source of truth: a
W&B failure is a warning, never a failed run.
"""

from __future__ import annotations

import contextlib
import os

from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.launch import resolve_path
from cactus_bench.store.wandb_mirror import WandbMirror


def wandb_group(identity: RunIdentity, row: dict) -> str:
    """The experiment's name (table1, delta_sweep, ...), else the CSV the sweep shares."""
    return row.get("experiment") or identity.results_csv.stem


def wandb_tags(identity: RunIdentity) -> list[str]:
    conf = identity.conf
    return [f"pair:{conf.model.name}", f"task:{conf.task.name}", f"rule:{identity.sampler}"]


def mirror_to_wandb(identity: RunIdentity, row: dict, records: list, baseline_records=None):
    conf = identity.conf
    mode = conf.logger.mode if conf.logger.mode in ("online", "offline", "disabled") else None
    run_name = f"{conf.model.name}-{conf.task.name}-{identity.sampler}-{row['run_id']}"
    config = identity.wandb_config(row["run_id"])
    with _environment(WANDB_MODE=mode, WANDB_ENTITY=conf.logger.entity):
        with WandbMirror(
            conf.logger.project,
            run_name,
            config,
            dir=resolve_path(conf.results_dir),
            group=wandb_group(identity, row),
            tags=wandb_tags(identity),
        ) as mirror:
            mirror.log_row(row)
            mirror.log_records(records, row)
            mirror.log_artifact(row, records, baseline_records)


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
