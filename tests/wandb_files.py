"""Read an offline W&B run back from its files: the run-<id>.wandb transaction log.

The log is a LevelDB-style record log (a 7-byte ':W&B' header, then 32 KiB blocks of chunks
with a 7-byte header each: checksum, length, type FULL/FIRST/MIDDLE/LAST) of protobuf
`Record`s, which wandb's own `wandb sync` uploads. Only tests use this reader.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from pathlib import Path

BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> Iterator:
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    position, chunks = 7, []
    while position + 7 <= len(data):
        left = BLOCK - position % BLOCK
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if left < 7 or (length == 0 and kind == 0):  # block trailer or zero padding
            position += left
            continue
        chunks.append(data[position + 7 : position + 7 + length])
        position += 7 + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            chunks = []
            yield record


def offline_run(folder: Path, timeout_s: float = 120.0) -> dict:
    """{group, tags, summary, history, artifacts, files} of the one offline run under folder.

    wandb's service process may still be writing the log when `run.finish()` has returned
    (seen on a loaded machine): wait for its exit record."""
    deadline = time.monotonic() + timeout_s
    while True:
        logs = list(Path(folder).glob("wandb/offline-run-*/run-*.wandb"))
        records = list(read_records(logs[0])) if len(logs) == 1 else []
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            break
        assert time.monotonic() < deadline, f"no finished offline run under {folder}: {logs}"
        time.sleep(0.5)
    log = logs[0]
    run = {"group": None, "tags": [], "summary": {}, "history": [], "artifacts": {}}
    run["files"] = log.parent / "files"
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "run":  # the first run record has them; later ones may update other fields
            run["group"] = run["group"] or record.run.run_group or None
            run["tags"] = run["tags"] or list(record.run.tags)
        elif kind == "summary":
            _put_items(run["summary"], record.summary.update)
        elif kind == "history":
            run["history"].append(_put_items({}, record.history.item))
        elif kind == "artifact":
            contents = record.artifact.manifest.contents
            run["artifacts"][record.artifact.name] = {
                "type": record.artifact.type,
                "files": {entry.path: Path(entry.local_path) for entry in contents},
            }
    return run


def _put_items(target: dict, items) -> dict:
    """Summary / history items into `target`; a nested key (a logged table's fields) nests."""
    for item in items:
        path = [item.key] if item.key else list(item.nested_key)
        node = target
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = json.loads(item.value_json)
    return target
