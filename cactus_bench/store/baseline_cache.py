"""Cache of verifier-only baselines for `baseline=cached`.

A sweep over samplers and δ decodes the same prompts with the same verifier many times; the
verifier-only baseline of those prompts depends only on the key below, so it is decoded once and
reused. The key includes the device name because the cached timings are only comparable with
runs on the same hardware. One JSON file per key, written atomically under a lock.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from filelock import FileLock

from cactus_bench.store.metadata import config_hash
from cactus_bench.store.summarise import summarise


def prompts_hash(prompts: Sequence) -> str:
    """Hash of the prompts in order: token-id lists or strings."""
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(
            json.dumps(
                list(prompt) if not isinstance(prompt, str) else prompt, separators=(",", ":")
            ).encode("utf-8")
        )
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def baseline_key(
    *,
    verifier_id: str,
    task: str,
    prompts: Sequence,
    sampling: dict,
    max_new_tokens: int,
    seed: int | None,
    device_name: str,
) -> str:
    """Cache key of a baseline; `sampling` holds temperature, top_p, top_k (and any others)."""
    if not prompts:
        raise ValueError("baseline_key needs the prompts the baseline decodes, got none")
    return config_hash(
        {
            "verifier_id": verifier_id,
            "task": task,
            "prompts": prompts_hash(prompts),
            "sampling": dict(sampling),
            "max_new_tokens": max_new_tokens,
            "seed": seed,
            "device_name": device_name,
        }
    )


class BaselineCache:
    """`BaselineCache("results/baselines")`: `put(key, records)`, `get(key)`, `totals(key)`."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(
                f"baseline cache key must be a hex string from baseline_key(), got {key!r}"
            )
        return self.directory / f"{key}.json"

    def put(self, key: str, records: Iterable, meta: dict | None = None) -> Path:
        """Store the baseline's per-request records (RequestRecord or dicts) and their totals."""
        dicts = [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in records]
        if any(d.get("num_draft_tokens", 0) for d in dicts):
            raise ValueError("a baseline must come from the verifier-only decoder (m = 0)")
        totals = summarise(dicts)  # validates the records and computes the baseline totals
        payload = {
            "key": key,
            "meta": meta or {},
            "totals": {
                "wall_time_baseline_s": totals["wall_time_spec_s"],
                "baseline_generated_tokens": totals["generated_tokens"],
                "tokens_per_s_baseline": totals["tokens_per_s_spec"],
                "n_requests": len(dicts),
            },
            "records": dicts,
        }
        path = self._path(key)
        self.directory.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            temporary = path.with_name(path.name + ".tmp")
            with open(temporary, "w", encoding="utf-8") as handle:
                json.dump(payload, handle, separators=(",", ":"), allow_nan=False)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        return path

    def _load(self, key: str) -> dict | None:
        path = self._path(key)
        if not path.exists():
            return None
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)

    def get(self, key: str) -> list[dict] | None:
        """The cached baseline records (pass as summarise's baseline_records), or None."""
        payload = self._load(key)
        return None if payload is None else payload["records"]

    def meta(self, key: str) -> dict | None:
        """What was stored beside the records (model pair, task, the machine's state)."""
        payload = self._load(key)
        return None if payload is None else payload.get("meta", {})

    def path(self, key: str) -> Path:
        return self._path(key)

    def totals(self, key: str) -> dict | None:
        """wall_time_baseline_s, baseline_generated_tokens, tokens_per_s_baseline, n_requests."""
        payload = self._load(key)
        return None if payload is None else payload["totals"]

    def __contains__(self, key: str) -> bool:
        return self._path(key).exists()
