"""Teacher shards on disk: the verifier's answers to one batch of prompts per file.

The distilled drafter's teacher phase (teacher.py: top-k raw logits) caches its teacher data
this way (so did the feature-head pilot, removed after its no-go: docs/feature-drafter.md).
Batch ``index`` of a fixed plan is the file ``<run_dir>/shards/shard_<index>.pt`` and is
sampled from its own seed (`shard_seed`), so a stopped run resumes at the first missing shard
and writes what an uninterrupted run would. A shard is written under a temporary name and
renamed, so a stop mid-write leaves no half shard behind. A trainer may read the folder while a
collection beside it is still filling it (`TrainingRecords.refresh`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch


def shard_path(run_dir: Path, index: int) -> Path:
    return run_dir / "shards" / f"shard_{index:05d}.pt"


def shard_names(run_dir: Path) -> list[str]:
    """File names of the cached shards, in index order."""
    return sorted(path.name for path in (run_dir / "shards").glob("shard_*.pt"))


def shard_seed(seed: int, index: int) -> int:
    """The seed of shard ``index``'s draws: its own, so shards can be written in any order."""
    return seed * 1_000_003 + index


def save_whole(obj, path: Path) -> None:
    """torch.save to ``path`` through a temporary file: a reader sees the old file or the new."""
    torch.save(obj, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").rename(path)


def write_shards(
    run_dir: Path,
    batches: list[list[int]],
    prompts: list[tuple[str, str]],
    indices: list[int],
    answer: Callable[[list[str], int], list[dict]],
    seed: int,
    cached_tokens: int,
    enough: Callable[[int], bool],
) -> Iterator[tuple[int, dict, int]]:
    """Answer and save each missing shard among ``indices`` until ``enough(answer tokens)``.

    ``prompts`` are (source, text) pairs, ``batches[index]`` the prompt indices of shard
    ``index``; ``answer(texts, seed)`` returns one record per text (``ids`` = prompt + answer,
    ``prompt_len``), to which the prompt's ``index`` and ``source`` are added. The count starts
    at ``cached_tokens``; yields (index, shard, answer tokens so far) after each write."""
    (run_dir / "shards").mkdir(parents=True, exist_ok=True)
    total = cached_tokens
    for index in indices:
        rows, path = batches[index], shard_path(run_dir, index)
        if path.exists():
            continue
        if enough(total):
            break
        wall, cpu = time.time(), time.process_time()
        records = answer([prompts[i][1] for i in rows], shard_seed(seed, index))
        for i, record in zip(rows, records, strict=True):
            record.update(index=i, source=prompts[i][0])
        num_tokens = sum(len(r["ids"]) - r["prompt_len"] for r in records)
        wall, cpu = time.time() - wall, time.process_time() - cpu
        shard = {"records": records, "num_tokens": num_tokens, "wall_s": wall, "cpu_s": cpu}
        save_whole(shard, path)
        total += num_tokens
        yield index, shard, total


def load_shards(run_dir: Path, names: list[str] | None = None) -> tuple[list[dict], dict]:
    """The records of the shards ``names`` (default: every cached one) and their totals:
    answer tokens, wall and CPU seconds of writing them, the number of shards and their names."""
    names = shard_names(run_dir) if names is None else names
    records, totals = [], {"tokens": 0, "wall_s": 0.0, "cpu_s": 0.0, "shards": 0, "names": names}
    for name in names:
        shard = torch.load(run_dir / "shards" / name)
        records.extend(shard["records"])
        totals["tokens"] += shard["num_tokens"]
        totals["wall_s"] += shard.get("wall_s", 0.0)
        totals["cpu_s"] += shard.get("cpu_s", 0.0)
        totals["shards"] += 1
    return records, totals


def split_records(records: list[dict], val_every: int) -> tuple[list[dict], list[dict]]:
    """(train, held_out): prompt index % val_every == 0 is held out (stable as data grows)."""
    held_out = [r for r in records if r["index"] % val_every == 0]
    return [r for r in records if r["index"] % val_every != 0], held_out


class TrainingRecords:
    """A shard folder's records split into train and held out (every ``val_every``-th prompt),
    with ``tokens``, the train records' target positions (rows of ``target_key``)."""

    def __init__(
        self, run_dir: Path, val_every: int, target_key: str, names: list[str] | None = None
    ):
        self.run_dir, self.val_every, self.target_key = run_dir, val_every, target_key
        self.load(names)

    def load(self, names: list[str] | None = None) -> None:
        records, self.totals = load_shards(self.run_dir, names)
        self.train, self.held_out = split_records(records, self.val_every)
        self.tokens = sum(len(r[self.target_key]) for r in self.train)

    def refresh(self) -> bool:
        """Reload every shard if the folder holds others than those loaded (a collection running
        beside the trainer wrote more); True when it did."""
        if shard_names(self.run_dir) == self.totals["names"]:
            return False
        self.load()
        return True
