"""Mirror results rows and the per-step AL series to Weights & Biases (`logger=wandb`).

The CSV stays the source of truth; W&B is a view. Without WANDB_API_KEY (and no WANDB_MODE set)
the run is recorded offline under `dir` for a later `wandb sync`, and one line says so;
WANDB_MODE=disabled makes every call a no-op.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping

from cactus_bench.results.summarise import _as_dict


class WandbMirror:
    """`WandbMirror(project, run_name, config)`; `.log_row(row)`, `.log_al_series(records)`."""

    def __init__(self, project: str, run_name: str, config: Mapping, dir: str | None = None):
        import wandb  # imported here: the CSV path must work without touching wandb

        mode = os.environ.get("WANDB_MODE")
        if not mode and not os.environ.get("WANDB_API_KEY"):
            mode = "offline"
            print(
                f"wandb: no WANDB_API_KEY, logging offline (sync later with `wandb sync "
                f"{dir or 'wandb'}/offline-run-*`)"
            )
        self.run = wandb.init(
            project=project,
            name=run_name,
            config=dict(config),
            dir=dir,
            mode=mode,
            reinit="create_new",
        )
        self._steps_logged = 0
        # The AL series gets its own x-axis so it never collides with other logged metrics.
        self.run.define_metric("al_series/step")
        self.run.define_metric("al_series/*", step_metric="al_series/step")

    @property
    def mode(self) -> str:
        return "disabled" if self.run.disabled else ("offline" if self.run.offline else "online")

    def log_row(self, row: Mapping) -> None:
        """Put the row's non-empty cells into the run summary, keyed `<task>/<column>`."""
        task = row.get("task") or "all"
        values = {}
        for name, value in row.items():
            if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
                continue
            values[f"{task}/{name}"] = (
                value if isinstance(value, (int, float, str, bool)) else str(value)
            )
        self.run.summary.update(values)

    def log_al_series(self, records: Iterable, task: str | None = None) -> int:
        """Log accepted drafts per verification step (and its running mean) in step order."""
        prefix = f"al_series/{task}/" if task else "al_series/"
        accepted_total = 0
        count = 0
        for record in records:
            for accepted in _as_dict(record)["accepted_per_step"]:
                count += 1
                accepted_total += accepted
                self._steps_logged += 1
                self.run.log(
                    {
                        "al_series/step": self._steps_logged,
                        prefix + "accepted": accepted,
                        prefix + "running_al": accepted_total / count,
                    }
                )
        return count

    def finish(self) -> None:
        self.run.finish()

    def __enter__(self) -> WandbMirror:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()
