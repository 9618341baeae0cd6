"""lm-eval's per-document log, slimmed for keeping, and the headline metric per prompt."""

from __future__ import annotations

from typing import Any


def scores_by_prompt(samples: list[dict], score_name: str, repeats: int) -> list[float]:
    """The headline metric per document (lm-eval's log order, which is the request order),
    averaged over repeats. A list-valued metric (IFEval's instruction level) counts as its mean."""
    metric, _, filter_name = score_name.partition(",")
    totals: dict[Any, float] = {}  # doc_id -> sum over repeats, in first-seen order
    for sample in samples:
        if sample.get("filter") != filter_name or metric not in sample:
            continue
        value = sample[metric]
        if isinstance(value, list):
            value = sum(map(float, value)) / len(value) if value else float("nan")
        totals[sample["doc_id"]] = totals.get(sample["doc_id"], 0.0) + float(value)
    return [total / repeats for total in totals.values()]


def slim_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """A logged lm-eval sample without the document and prompt (GPQA must not leak as text)."""
    slim = {
        key: sample[key]
        for key in ("doc_id", "filter", "target", "filtered_resps")
        if key in sample
    }
    metrics = [metric for metric in sample.get("metrics", []) if metric in sample]
    slim.update({metric: sample[metric] for metric in metrics})
    return _plain(slim)


def _plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars become Python numbers, containers are copied."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalar
        return value.item()
    return value
