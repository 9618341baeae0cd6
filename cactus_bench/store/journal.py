"""RecordJournal: every finished request of a run, durable the moment it ends, for resume.

A run appends one JSON line per decoded request (`{"arm", **RequestRecord.to_dict()}`) with ONE
`os.write` on an O_APPEND descriptor followed by fsync, under a file lock shared with any other
process writing the same journal. A process killed at any instant (kill -9, a Slurm time limit,
a preemption) therefore leaves every request it finished on disk, and at most the line of the
request it was writing torn; `records()` skips a torn last line and the next append cuts it off.

A rerun of the same run reads the journal back and decodes only the requests without a line
(`run/resume.py`). Requests are keyed by (arm, seed): a run draws a distinct sampling seed per
request (`tasks.lm.request_seed`), so the key names one request of one arm; the prompt ids saved
with it are checked on replay.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from filelock import FileLock

from cactus_bench.store.csv_store import LOCK_TIMEOUT_S, append_bytes, cut_torn_tail

ARMS = ("spec", "baseline")


class RecordJournal:
    """`RecordJournal(path)`: `append(arm, record)` durably; `records(arm)` -> {seed: dict}."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = FileLock(str(self.path) + ".lock", timeout=LOCK_TIMEOUT_S)

    def append(self, arm: str, record) -> None:
        """Append one finished request (a RequestRecord or its dict), flushed and fsync'd."""
        if arm not in ARMS:
            raise ValueError(f"arm must be one of {ARMS}, got {arm!r}")
        entry = record.to_dict() if hasattr(record, "to_dict") else dict(record)
        line = json.dumps({"arm": arm, **entry}, separators=(",", ":"), allow_nan=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self.path.exists():
                cut_torn_tail(self.path)
            append_bytes(self.path, line.encode("utf-8"))

    def entries(self) -> list[dict]:
        """Every complete line in write order (a torn last line is not a request)."""
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def records(self, arm: str) -> dict[int, dict]:
        """{seed: record dict} of `arm`'s finished requests (the last line wins on a repeat)."""
        return {entry["seed"]: entry for entry in self.entries() if entry["arm"] == arm}

    def count(self, arm: str | None = None) -> int:
        """Lines written (one per decoded request), of one arm or of all."""
        return sum(arm is None or entry["arm"] == arm for entry in self.entries())

    def discard(self) -> None:
        """Delete the journal: a forced rerun of a finished run starts afresh."""
        with self._lock:
            self.path.unlink(missing_ok=True)
