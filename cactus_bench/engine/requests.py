"""A request as every decoder reads it, and how the callers of a batched run may write one.

The decoders (engine/decoder.py, cactus_bench.vllm.decoder) and the batch loop (engine/batched.py)
all import this module and nothing imports them back from here: the request types sit below
both, so neither needs a lazy import to reach the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from cactus_bench.engine.runtime import check_prompt
from cactus_bench.engine.sampling import SamplingParams


@dataclass(frozen=True)
class Request:
    """A request's arguments as every decoder reads them: checked, stops as a list, the
    sampling settled and a seed drawn (and recorded) when none was given."""

    prompt_ids: list[int]
    max_new_tokens: int
    stop: list[str]
    seed: int
    sampling: SamplingParams

    @classmethod
    def make(cls, decoder, prompt_ids, max_new_tokens, stop, seed, sampling) -> Request:
        prompt_ids = check_prompt(prompt_ids, max_new_tokens)
        if seed is None:
            seed = torch.Generator().seed() % 2**63  # a fresh seed, recorded for reproduction
        return cls(
            prompt_ids=list(prompt_ids),
            max_new_tokens=int(max_new_tokens),
            stop=[stop] if isinstance(stop, str) else list(stop or []),
            seed=int(seed),
            sampling=sampling if sampling is not None else decoder.sampling,
        )


@dataclass(frozen=True)
class BatchRequest:
    """`generate`'s arguments for one request of a batch."""

    prompt_ids: list[int]
    max_new_tokens: int
    stop: list[str] | str | None = None
    seed: int | None = None
    sampling: SamplingParams | None = None


def as_request(decoder, request) -> Request:
    """A BatchRequest, a Request or a dict of generate's keywords -> a checked `Request`."""
    if isinstance(request, Request):
        return request
    if isinstance(request, Mapping):
        request = BatchRequest(**request)
    if not isinstance(request, BatchRequest):
        raise ValueError("each request must be a BatchRequest or a dict of generate's keywords")
    return Request.make(
        decoder,
        request.prompt_ids,
        request.max_new_tokens,
        request.stop,
        request.seed,
        request.sampling,
    )


def check_batch(batch) -> int:
    """The number of requests decoded at once, checked once at a decoder's `generate_batch`."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an integer >= 1; got {batch!r}")
    return batch
