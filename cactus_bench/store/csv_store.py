"""ResultStore: the append-only results CSV shared by parallel jobs, plus its JSONL of records.

Concurrency and crash safety: every append takes a file lock (`<csv>.lock`, the
`filelock` package, which works across processes and Slurm jobs on a shared file system that
supports fcntl locks), then writes the whole CSV line with ONE `os.write` on an O_APPEND descriptor,
then fsyncs. A killed process has almost always written the whole line or nothing; the rare
torn tail (Linux may stop a multi-page write at a page boundary on SIGKILL; a machine crash) is
skipped by `read()` and cut off, with a warning, by the next append, so no finished row is lost.
"""

from __future__ import annotations

import csv
import io
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
from filelock import FileLock

from cactus_bench.store.schema import (
    COLUMNS,
    RENAMED_COLUMNS,
    coerce_frame,
    row_to_cells,
)

LOCK_TIMEOUT_S = 600  # a peer holding the lock longer than this is stuck, not busy


def _csv_line(cells: list[str]) -> bytes:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(cells)
    return buffer.getvalue().encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    # A regular-file write is normally complete in one call; loop for the rare short write.
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


def append_bytes(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def cut_torn_tail(path: Path) -> None:
    """Drop a last line without its newline: the remains of a write interrupted by a crash."""
    size = path.stat().st_size
    if size == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return
        handle.seek(max(0, size - (1 << 20)))
        tail = handle.read()
        cut = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        warnings.warn(
            f"{path}: dropping a torn last line ({size - cut} bytes) left by an interrupted writer",
            stacklevel=3,
        )
        handle.truncate(cut)
        handle.flush()
        os.fsync(handle.fileno())


class ResultStore:
    """`ResultStore("results/runs.csv")`: append validated rows; read them back typed."""

    def __init__(self, csv_path: str | os.PathLike):
        self.csv_path = Path(csv_path)
        if self.csv_path.suffix != ".csv":
            raise ValueError(f"results file must end in .csv, got {self.csv_path}")
        self.records_path = self.csv_path.with_name(self.csv_path.stem + ".records.jsonl")
        self.steps_path = self.csv_path.with_name(self.csv_path.stem + ".steps.jsonl")
        self._lock = FileLock(str(self.csv_path) + ".lock", timeout=LOCK_TIMEOUT_S)

    # -- writing ---------------------------------------------------------------------------
    def append(self, row: dict) -> None:
        """Validate `row` (see schema.row_to_cells) and append it atomically."""
        row_to_cells(row)  # fail on bad input before touching the file or the lock
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            header = self._header_after_upgrade()
            append_bytes(self.csv_path, _csv_line(row_to_cells(row, header)))

    def append_records(self, run_id: str, records: Iterable, arm: str = "spec") -> int:
        """Append per-request records (RequestRecord or its dict) to `<stem>.records.jsonl`.

        Each line is `{"run_id", "arm", "request_index", **record}`; arm is "spec" for the run's
        own decoder and "baseline" for the verifier-only baseline. Returns the count written.
        """
        if arm not in ("spec", "baseline"):
            raise ValueError(f"arm must be 'spec' or 'baseline', got {arm!r}")
        lines = []
        for index, record in enumerate(records):
            record_dict = record.to_dict() if hasattr(record, "to_dict") else dict(record)
            entry = {"run_id": run_id, "arm": arm, "request_index": index, **record_dict}
            lines.append(json.dumps(entry, separators=(",", ":"), allow_nan=False) + "\n")
        if not lines:
            return 0
        self.records_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self.records_path.exists():
                cut_torn_tail(self.records_path)
            append_bytes(self.records_path, "".join(lines).encode("utf-8"))
        return len(lines)

    def append_steps(self, run_id: str, arm: str, steps: Iterable) -> int:
        """Append a batched run's decoder steps (engine.batched.BatchStep) to `<stem>.steps.jsonl`
        as ONE line per arm: `{"run_id", "arm", <field>: [one value per step]}` with the step's
        kind, rows, verifier tokens fed, drafts per row (max), and its draft / verify / rule /
        prefill seconds: what the step-cost model fits (report/batch_cost.py). Returns steps."""
        steps = list(steps)
        if not steps:
            return 0
        entry = {
            "run_id": run_id,
            "arm": arm,
            "kind": [step.kind for step in steps],
            "rows": [step.rows for step in steps],
            "fed": [sum(step.fed) for step in steps],
            "drafts": [max(step.drafts, default=0) for step in steps],
            "accepted": [sum(step.accepted) for step in steps],
            **{
                name: [round(getattr(step, name), 7) for step in steps]
                for name in ("draft_s", "verify_s", "rule_s", "prefill_s")
            },
        }
        self.steps_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            append_bytes(
                self.steps_path, (json.dumps(entry, separators=(",", ":")) + "\n").encode()
            )
        return len(steps)

    def _header_after_upgrade(self) -> list[str]:
        """The file's header, created or widened to hold every current column. Lock held."""
        if self.csv_path.exists():
            cut_torn_tail(self.csv_path)  # may leave nothing when the header itself was torn
        if not self.csv_path.exists() or self.csv_path.stat().st_size == 0:
            append_bytes(self.csv_path, _csv_line(COLUMNS))
            return list(COLUMNS)
        header = self._read_header()
        renamed = [RENAMED_COLUMNS.get(name, name) for name in header]
        missing = [c for c in COLUMNS if c not in renamed]
        if not missing and renamed == header:
            return header
        # An older harness wrote this file: rewrite it once under the current column names with
        # the new columns appended (old rows get empty cells), via a temporary file and an
        # atomic rename.
        widened = renamed + missing
        temporary = self.csv_path.with_name(self.csv_path.name + ".upgrade.tmp")
        with (
            open(self.csv_path, newline="", encoding="utf-8") as src,
            open(temporary, "w", newline="", encoding="utf-8") as dst,
        ):
            reader = csv.reader(src)
            writer = csv.writer(dst, lineterminator="\n")
            next(reader)
            writer.writerow(widened)
            for cells in reader:
                writer.writerow(cells + [""] * len(missing))
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(temporary, self.csv_path)
        return widened

    def _read_header(self) -> list[str]:
        with open(self.csv_path, newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle), [])
        if "config_hash" not in header or "status" not in header:
            raise ValueError(
                f"{self.csv_path} does not look like a cactus-bench results CSV "
                f"(header starts {header[:4]}); point the store at another file"
            )
        return header

    # -- reading ---------------------------------------------------------------------------
    def read(self) -> pd.DataFrame:
        """All rows, typed by the schema (missing cells are NA). Empty frame if no file yet."""
        if not self.csv_path.exists() or self.csv_path.stat().st_size == 0:
            return coerce_frame(pd.DataFrame(columns=COLUMNS))
        text = self.csv_path.read_text(encoding="utf-8")
        if not text.endswith("\n"):
            # An interrupted writer's partial line: not a row (the next append cuts it off).
            warnings.warn(f"{self.csv_path}: ignoring a torn last line", stacklevel=2)
            text = text[: text.rfind("\n") + 1]
        if not text:  # only a torn header: no rows yet
            return coerce_frame(pd.DataFrame(columns=COLUMNS))
        frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
        if "config_hash" not in frame.columns or "status" not in frame.columns:
            raise ValueError(
                f"{self.csv_path} does not look like a cactus-bench results CSV "
                f"(header starts {list(frame.columns[:4])}); point the store at another file"
            )
        frame = frame.rename(columns=RENAMED_COLUMNS)  # an older harness's names
        missing = [c for c in COLUMNS if c not in frame.columns]
        for name in missing:  # an older file read before any new append widened it
            frame[name] = ""
        return coerce_frame(frame)

    def finished_hashes(self) -> set[str]:
        """Config hashes that already have a row with status ok."""
        frame = self.read()
        return set(frame.loc[frame["status"] == "ok", "config_hash"].dropna())

    def has_finished(self, config_hash: str) -> bool:
        return config_hash in self.finished_hashes()
