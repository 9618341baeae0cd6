"""Sampling parameters and the logits -> probabilities processing shared by drafter and verifier.

The paper (and its vLLM reference code) applies temperature, then top-k, then top-p to both the
drafter's and the verifier's logits; p and q in every acceptance rule are these processed
distributions (PAPER.md, Notation). Temperature 0 means greedy decoding: the processed
distribution is the one-hot of the argmax, and verification uses the `greedy` rule.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from cactus_bench.paper import PAPER
from cactus_bench.samplers.chain import sample_categorical


@dataclass(frozen=True)
class SamplingParams:
    """temperature >= 0 (0 = greedy); top_p in (0, 1] (1 = off); top_k >= 0 (0 = off)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        # None (as lm-eval gen_kwargs may carry) means "off" for top-p / top-k.
        if self.top_k is None:
            object.__setattr__(self, "top_k", 0)
        if self.top_p is None:
            object.__setattr__(self, "top_p", 1.0)
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0; got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] (1 disables it); got {self.top_p}")
        if int(self.top_k) != self.top_k or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it); got {self.top_k}")
        object.__setattr__(self, "top_k", int(self.top_k))

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_gen_kwargs(cls, gen_kwargs: dict[str, Any], default: SamplingParams) -> SamplingParams:
        """Overrides `default` with lm-eval style gen_kwargs (temperature, top_p, top_k,
        do_sample); `do_sample=False` means greedy. Other keys are ignored."""
        values = default.to_dict()
        for key in ("temperature", "top_p", "top_k"):
            if gen_kwargs.get(key) is not None:
                values[key] = gen_kwargs[key]
        if gen_kwargs.get("do_sample") is False:
            values["temperature"] = 0.0
        return cls(**values)


# The paper's processed law (PAPER.md, Notation), defined once beside the law it parametrises:
# benchmarks, the GPU check and both drafter trainers decode and distil at it.
PAPER_SAMPLING = SamplingParams(PAPER.temperature, PAPER.top_p, PAPER.top_k)


# What every draw says of a law it cannot sample.
BAD_LAW = (
    "cannot sample a token: the probabilities contain NaN/inf, negatives or sum to 0 "
    "(the model produced NaN logits; try model.dtype=float32)"
)


def process_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """[..., V] logits -> [..., V] float32 probabilities after temperature, top-k, top-p.

    Greedy (temperature 0) gives the one-hot of the argmax (first index on ties, as
    torch.argmax). Top-p keeps the smallest set of most likely tokens whose mass reaches top_p
    (the token that crosses it is kept), computed on the top-k-renormalised law, as in vLLM and
    HF's warpers. Logits of -inf (tokens a model can never emit) get probability exactly 0.
    """
    logits = logits.float()
    if params.is_greedy:
        hot = torch.zeros_like(logits)
        return hot.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    logits = logits / params.temperature
    vocab = logits.shape[-1]
    if 0 < params.top_k < vocab:
        # Only the k largest logits survive: sort just those (topk returns them descending).
        top_values, top_index = logits.topk(params.top_k, dim=-1)  # [..., k]
        top_probs = _top_p_sorted(top_values.softmax(dim=-1), params.top_p)
        return torch.zeros_like(logits).scatter_(-1, top_index, top_probs)
    probs = logits.softmax(dim=-1)
    if params.top_p >= 1.0:
        return probs
    sorted_probs, sorted_index = probs.sort(dim=-1, descending=True)
    nucleus = _top_p_sorted(sorted_probs, params.top_p)
    return torch.zeros_like(probs).scatter_(-1, sorted_index, nucleus)


def _top_p_sorted(sorted_probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter on probabilities sorted descending along the last axis, renormalised."""
    if top_p >= 1.0:
        return sorted_probs
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [..., k] mass of better tokens
    kept = sorted_probs * (mass_before < top_p)  # the first token always has mass_before = 0
    return kept / kept.sum(dim=-1, keepdim=True)


def sample_token(probs: torch.Tensor, generator: torch.Generator | None, greedy: bool):
    """[B, V] probabilities -> [B, 1] int64 token ids (argmax when greedy, no random draw).

    On a CPU one uniform per row inverts the cumulative law (`sample_categorical`): for a single
    sample torch.multinomial draws one exponential per vocabulary entry, ~1.06 ms over SmolLM2's
    49,152 ids on one core here against ~0.13 ms, paid for every draft token and every
    verifier-only token. On other devices torch.multinomial runs in parallel and checks its
    input on the device without a host sync, so it stays. The two draw different tokens from
    the same seed; both sample exactly the given law.
    """
    if greedy:
        return probs.argmax(dim=-1, keepdim=True)
    if probs.device.type != "cpu":
        return torch.multinomial(probs, 1, generator=generator)
    # NaN makes both extremes NaN (every comparison fails); inf fails isfinite. (A global
    # aminmax is ~7x faster on CPU than one along dim=-1.)
    lowest, highest = torch.aminmax(probs)
    valid = (lowest >= 0) & torch.isfinite(highest) & (probs.sum(dim=-1) > 0).all()
    if not bool(valid):
        raise ValueError(BAD_LAW)
    return sample_categorical(probs, generator).unsqueeze(-1)


def draw_tokens(probs: torch.Tensor, uniform: torch.Tensor, greedy: torch.Tensor) -> torch.Tensor:
    """[R, V] probabilities, [R] float64 uniforms, [R] bool greedy rows -> [R] int64 tokens,
    with no host read: the argmax where greedy, else the law's inverse CDF at the uniform
    (`sample_categorical`, the same law as `sample_token`). The engine's batched steps draw
    with it from counter-based uniforms (draws.py); bad laws are flagged by `bad_rows`."""
    sampled = sample_categorical(probs, None, uniform)
    return torch.where(greedy, probs.argmax(dim=-1), sampled)


def bad_rows(probs: torch.Tensor) -> torch.Tensor:
    """[R, ..., V] -> [R] bool: rows holding NaN/inf or negatives, or with no mass (what
    `sample_token` refuses), reduced over every leading axis after the first."""
    finite = torch.isfinite(probs).flatten(1).all(-1)
    negative = (probs < 0).flatten(1).any(-1)
    empty = (probs.sum(-1) <= 0).reshape(probs.shape[0], -1).any(-1)
    return ~finite | negative | empty
