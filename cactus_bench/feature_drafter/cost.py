"""Step cost of a draft model against a verifier step: one cached decode step, CPU thread time.

Each sample prefills a fresh KV cache with the context (untimed) and times one forward over the
next position, on this thread's CPU clock (time slices lost to other processes on a shared
machine do not count; run with one torch thread). Head, drafter and verifier are sampled
interleaved, so slow phases of the machine hit all of them alike; the medians and the spread of
the per-repeat ratios are reported.
"""

from __future__ import annotations

import statistics
import time

import torch
from transformers import DynamicCache


@torch.no_grad()
def model_step_s(model, ids: torch.Tensor) -> float:
    """Seconds of one cached step of a causal LM at the last position of ``ids`` [1, T]."""
    cache = DynamicCache()
    model(input_ids=ids[:, :-1], cache=cache, use_cache=True, logits_to_keep=1)
    start = time.thread_time()
    model(input_ids=ids[:, -1:], cache=cache, use_cache=True, logits_to_keep=1)
    return time.thread_time() - start


@torch.no_grad()
def head_step_s(head, ids: torch.Tensor, features: torch.Tensor) -> float:
    """Seconds of one cached step of the feature head (fc, layer, subset head, full-vocabulary
    logits) at the last position of ``ids`` [1, T] / ``features`` [1, T, H]."""
    cache = DynamicCache()
    head.full_logits(ids[:, :-1], features[:, :-1], cache=cache, use_cache=True)
    start = time.thread_time()
    head.full_logits(ids[:, -1:], features[:, -1:], cache=cache, use_cache=True)
    return time.thread_time() - start


def step_costs(head, drafter, verifier, record: dict, repeats: int) -> dict:
    """Median step seconds of head, drafter and verifier on ``record``'s context, and the
    per-repeat ratios to the verifier step (median, quartiles)."""
    n = len(record["ids"]) - 1
    ids = record["ids"][None].long()  # [1, S]
    head_ids, features = ids[:, 1:], record["features"][None, :n].float()
    samples: dict[str, list[float]] = {"head": [], "drafter": [], "verifier": []}
    for _ in range(repeats):
        samples["head"].append(head_step_s(head, head_ids, features))
        samples["drafter"].append(model_step_s(drafter, ids[:, :-1]))
        samples["verifier"].append(model_step_s(verifier, ids[:, :-1]))
    out: dict = {f"{k}_step_ms": 1e3 * statistics.median(v) for k, v in samples.items()}
    for name in ("head", "drafter"):
        ratios = [a / b for a, b in zip(samples[name], samples["verifier"], strict=True)]
        q1, q2, q3 = statistics.quantiles(ratios, n=4)
        out[f"{name}_over_verifier"] = {"median": q2, "q25": q1, "q75": q3}
    out.update(repeats=repeats, context_tokens=n, clock="thread_time")
    return out
