"""Mirror a results row and its per-request records to Weights & Biases (`logger=wandb`).

The CSV stays the source of truth; W&B is a view, laid out as its users expect:
- runs grouped by experiment (or sweep) and tagged by pair, task and rule, so a sweep's runs
  filter and compare side by side;
- the row's cells in the run summary (`<task>/<column>`), the per-step numbers as a few
  histograms (one log call, not one per step), a per-prompt `wandb.Table`;
- the CSV row and the per-request records as a `results` artifact.

Credentials are wherever wandb looks for them: WANDB_API_KEY, WANDB_IDENTITY_TOKEN_FILE or the
netrc entry `wandb login` writes. With none of them (and no WANDB_MODE) the run is recorded
offline under `dir` for a later `wandb sync`, and one line says so; WANDB_MODE=disabled makes
every call a no-op.
"""

from __future__ import annotations

import csv
import io
import json
import math
import netrc
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

from cactus_bench.store.schema import COLUMNS, row_to_cells
from cactus_bench.store.summarise import as_dict

DEFAULT_BASE_URL = "https://api.wandb.ai"


def wandb_credentials() -> str | None:
    """Where wandb would find credentials for WANDB_BASE_URL (None: nowhere, so offline)."""
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE"):
        if os.environ.get(name):
            return name
    host = urlparse(os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL).hostname
    path = _netrc_path()
    try:
        entry = netrc.netrc(str(path)).authenticators(host) if path.exists() else None
    except (netrc.NetrcParseError, OSError):
        return None
    return f"netrc ({path})" if entry and entry[2] else None


def _netrc_path() -> Path:
    """The netrc file wandb reads and `wandb login` writes: $NETRC, else ~/.netrc (~/_netrc)."""
    if os.environ.get("NETRC"):
        return Path(os.environ["NETRC"]).expanduser()
    unix = Path("~/.netrc").expanduser()
    windows = Path("~/_netrc").expanduser()
    return windows if not unix.exists() and windows.exists() else unix


class WandbMirror:
    """`WandbMirror(project, run_name, config, group=..., tags=...)`; then `.log_row(row)`,
    `.log_records(records, row)`, `.log_artifact(row, records)`."""

    def __init__(
        self,
        project: str,
        run_name: str,
        config: Mapping,
        dir: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
    ):
        import wandb  # lazy: the CSV path must work without touching wandb

        mode = os.environ.get("WANDB_MODE")
        if not mode and wandb_credentials() is None:
            mode = "offline"
            print(
                "wandb: no credentials (WANDB_API_KEY or `wandb login`), logging offline (sync "
                f"later with `wandb sync {dir or '.'}/wandb/offline-run-*`)"
            )
        self._wandb = wandb
        self.run = wandb.init(
            project=project,
            name=run_name,
            config=dict(config),
            dir=dir,
            mode=mode,
            group=group,
            tags=[tag[:64] for tag in tags],  # W&B's limit per tag
            reinit="create_new",
        )

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

    def log_records(self, records: Iterable, row: Mapping) -> int:
        """Per-step numbers as histograms and one per-prompt table, in ONE log call (a run of
        4096-token answers has thousands of steps: one call each would flood the run)."""
        wandb = self._wandb
        task = row.get("task") or "all"
        dicts = [as_dict(r) for r in records]
        accepted = [a for r in dicts for a in r.get("accepted_per_step") or []]
        n_prompts = row.get("n_prompts") or len(dicts)
        scores = _scores(row)
        table = wandb.Table(columns=list(PROMPT_COLUMNS))
        for index, record in enumerate(dicts):
            table.add_data(*_prompt_cells(index, record, n_prompts, scores))
        logged = {f"{task}/prompts": table}
        if accepted:  # a verifier-only run drafts nothing
            per_prompt = [r["accepted_per_step"] for r in dicts if r.get("accepted_per_step")]
            logged[f"{task}/accepted_per_step"] = wandb.Histogram(accepted)
            logged[f"{task}/al_per_prompt"] = wandb.Histogram([sum(a) / len(a) for a in per_prompt])
        rates = [_ratio(len(r["output_ids"]), r.get("total_time_s")) for r in dicts]
        if any(rate is not None for rate in rates):
            logged[f"{task}/tokens_per_s_per_prompt"] = wandb.Histogram(
                [rate for rate in rates if rate is not None]
            )
        self.run.log(logged)
        return len(accepted)

    def log_artifact(self, row: Mapping, records: Iterable, baseline_records=None) -> None:
        """The CSV row (header + one line) and the per-request records as one artifact."""
        wandb = self._wandb
        artifact = wandb.Artifact(f"results-{row['run_id']}", type="results")
        with tempfile.TemporaryDirectory() as folder:
            row_path, records_path = Path(folder) / "row.csv", Path(folder) / "records.jsonl"
            text = io.StringIO()
            writer = csv.writer(text, lineterminator="\n")
            writer.writerow(COLUMNS)
            writer.writerow(row_to_cells(dict(row)))
            row_path.write_text(text.getvalue(), encoding="utf-8")
            lines = [
                json.dumps({"run_id": row["run_id"], "arm": arm, **as_dict(record)})
                for arm, group in (("spec", records), ("baseline", baseline_records or ()))
                for record in group
            ]
            records_path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            artifact.add_file(str(row_path))
            artifact.add_file(str(records_path))
            self.run.log_artifact(artifact)  # copies the files before the folder goes

    def finish(self) -> None:
        self.run.finish()

    def __enter__(self) -> WandbMirror:
        return self

    def __exit__(self, *exc) -> None:
        self.finish()


PROMPT_COLUMNS = (
    "prompt",
    "score",
    "steps",
    "accepted",
    "al",
    "generated_tokens",
    "tokens_per_s",
    "stop_reason",
    "text",
)


def _scores(row: Mapping) -> list | None:
    cell = row.get("score_by_prompt")
    if cell is None or cell == "":
        return None
    return json.loads(cell) if isinstance(cell, str) else list(cell)


def _prompt_cells(index: int, record: Mapping, n_prompts: int, scores) -> list:
    """One table row; with repeats, record i decodes prompt i % n_prompts."""
    prompt = index % n_prompts if n_prompts else index
    accepted = record.get("accepted_per_step") or []
    generated = len(record.get("output_ids") or [])
    score = scores[prompt] if scores is not None and prompt < len(scores) else None
    return [
        prompt,
        score,
        len(accepted),
        sum(accepted),
        _ratio(sum(accepted), len(accepted)),
        generated,
        _ratio(generated, record.get("total_time_s")),
        record.get("stop_reason"),
        record.get("text"),
    ]


def _ratio(numerator, denominator) -> float | None:
    return float(numerator) / denominator if denominator else None
