"""The paper's published values (package data: paper_values.yaml beside this file), looked up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

DEFAULT_REFERENCE = Path(__file__).with_name("paper_values.yaml")  # shipped in the wheel too
METRICS = ("score", "al", "rej_pct", "speedup_walltime", "speedup")
_ENTRY_KEYS = {"drafter", "verifier", "m", "sampler", "delta", "task", "metric", "value", "source"}
_OPTIONAL_KEYS = {"device", "approximate", "note"}


def model_key(model_id: str | None) -> str | None:
    """'Qwen/Qwen3-0.6B', '/ckpt/qwen3-0.6b/' and 'qwen3-0.6b' all become 'qwen3-0.6b'."""
    if _absent(model_id) or str(model_id) == "":
        return None
    return str(model_id).rstrip("/").rsplit("/", 1)[-1].lower()


def _absent(value) -> bool:
    """None, NaN or pandas NA: what an empty CSV cell becomes."""
    return value is None or bool(pd.isna(value))


@dataclass(frozen=True)
class PaperValue:
    value: float
    source: str
    approximate: bool = False
    device: str | None = None


class Reference:
    """Published values keyed by (drafter, verifier, m, sampler, delta, task, metric)."""

    def __init__(self, entries: list[dict], sources: dict[str, dict]):
        self.sources = sources
        self._values: dict[tuple, PaperValue] = {}
        for entry in entries:
            key = self.key(
                entry["drafter"],
                entry["verifier"],
                entry["m"],
                entry["sampler"],
                entry["delta"],
                entry["task"],
                entry["metric"],
            )
            self._values[key] = PaperValue(
                float(entry["value"]),
                entry["source"],
                bool(entry.get("approximate", False)),
                entry.get("device"),
            )

    @staticmethod
    def key(drafter, verifier, m, sampler, delta, task, metric) -> tuple:
        verifier_only = sampler == "verifier"  # the verifier row depends on neither drafter nor m
        return (
            None if verifier_only else model_key(drafter),
            model_key(verifier),
            None if verifier_only or _absent(m) else int(m),
            sampler,
            None if _absent(delta) else round(float(delta), 6),
            task,
            metric,
        )

    def lookup(self, drafter, verifier, m, sampler, delta, task, metric) -> PaperValue | None:
        return self._values.get(self.key(drafter, verifier, m, sampler, delta, task, metric))

    def __len__(self) -> int:
        return len(self._values)

    @classmethod
    def empty(cls) -> Reference:
        return cls([], {})


def load_reference(path: str | Path | None = DEFAULT_REFERENCE) -> Reference:
    """Parse and validate the reference YAML; every entry must cite a known source."""
    if path is None:
        return Reference.empty()
    path = Path(path)
    if not path.exists():
        raise ValueError(f"reference file {path} not found; pass --reference none to skip it")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    sources = data.get("sources") or {}
    entries = data.get("entries") or []
    for name, source in sources.items():
        if not isinstance(source, dict) or not source.get("cite"):
            raise ValueError(f"{path}: source {name!r} needs a 'cite' text")
    for index, entry in enumerate(entries + (data.get("unplaced") or [])):
        where = f"{path}: entry {index} ({entry})"
        if entry.get("source") not in sources:
            raise ValueError(f"{where} cites unknown source {entry.get('source')!r}")
        if entry.get("metric") not in METRICS:
            raise ValueError(f"{where}: metric must be one of {METRICS}")
        if not isinstance(entry.get("value"), (int, float)) or isinstance(entry["value"], bool):
            raise ValueError(f"{where}: value must be a number")
    for index, entry in enumerate(entries):
        keys = set(entry)
        if not _ENTRY_KEYS <= keys or not keys <= _ENTRY_KEYS | _OPTIONAL_KEYS:
            raise ValueError(
                f"{path}: entry {index} must have exactly the keys "
                f"{sorted(_ENTRY_KEYS)} (+ optional {sorted(_OPTIONAL_KEYS)}), "
                f"got {sorted(keys)}"
            )
    reference = Reference(entries, sources)
    if len(reference) != len(entries):
        raise ValueError(f"{path}: two entries share the same key; keep one value per cell")
    return reference
