"""The drafter's processed law on vLLM's model runner V2 (vllm >= 0.34), as pure torch.

V2's draft-model speculator samples drafts with `gumbel_sample(logits, ..., apply_temperature=True)`
and caches the logits it was handed, before temperature, in a `DraftLogitsCache`, which the
rejection sampler reads back as the drafter's law softmax(logits / T). vLLM applies no top-k or
top-p to drafts (vllm/v1/worker/gpu/spec_decode/speculator.py, `_copy_request_inputs`), while
every rule's q is the processed law (T, then top-k, then top-p; the paper's code and the HF
engine's `process_logits`). So the speculator of the registered method METHOD
(cactus_bench.vllm.v2_speculator) hands vLLM logits already set to -inf outside each request's
top-k, then top-p, set: softmax(masked / T) is then exactly the processed law, both for the
draws and for the cache the rule reads.

No host read anywhere (no .item(), no data-dependent shape): the draft steps run inside V2's
CUDA graphs. So the mask sorts the full vocabulary of every row, even where a request has
neither top-k nor top-p (knowing that would take a read); tests compile it with
torch.compile(fullgraph=True) and count host reads.
"""

from __future__ import annotations

import torch

METHOD = "cactus_draft_model"  # speculative_config method= on the V2 line (engines.py)
CONFIG_CLASS = "cactus_bench.vllm.v2_method.ProcessedLawSpeculatorConfig"
SPECULATOR_CLASS = "cactus_bench.vllm.v2_speculator.ProcessedLawSpeculator"
SAMPLING_EPS = 1e-5  # vLLM's greedy threshold; V2's own kernels test temperature == 0


def processed_law_logits(
    logits: torch.Tensor,  # [R, V] drafter logits, one row per drafted request
    states: torch.Tensor,  # [R] int: each row's request state (-1: a padded row)
    temperature: torch.Tensor,  # [S] per request state
    top_k: torch.Tensor,  # [S] int (0 or >= V: off)
    top_p: torch.Tensor,  # [S] float (>= 1: off)
) -> torch.Tensor:
    """-> [R, V] logits (their dtype), -inf outside each row's top-k then top-p set.

    The set is computed on softmax(logits / T) as `process_logits` does: the k largest logits,
    then the smallest prefix of them (by decreasing probability, renormalised over the k) whose
    mass reaches top_p, the token that crosses it kept. Greedy rows (T below SAMPLING_EPS) and
    padded rows come back unchanged."""
    rows, vocab = logits.shape
    valid = states >= 0
    state = states.long().clamp(min=0)
    temp = temperature[state].float()  # [R]
    sampled = valid & (temp >= SAMPLING_EPS)
    k = top_k[state].long()
    k = torch.where((k > 0) & (k < vocab), k, vocab)  # [R]
    p = top_p[state].float()  # [R]
    scaled = logits.float() / torch.where(sampled, temp, 1.0).unsqueeze(-1)
    ordered, order = scaled.sort(dim=-1, descending=True, stable=True)  # [R, V]
    in_k = torch.arange(vocab, device=logits.device) < k.unsqueeze(-1)  # [R, V]
    probs = torch.softmax(ordered.masked_fill(~in_k, float("-inf")), dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs  # the first token always has 0 before it
    keep_sorted = in_k & ((mass_before < p.unsqueeze(-1)) | (p.unsqueeze(-1) >= 1))
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # vocabulary order
    keep |= ~sampled.unsqueeze(-1)
    return logits.masked_fill(~keep, float("-inf"))


def register_method() -> bool:
    """Register METHOD with vLLM (`register_speculative_method`, vllm >= 0.34; a general
    plugin calls it in every process); False where this vLLM has no such registry."""
    try:
        from vllm.v1.worker.gpu.spec_decode.speculator_config import (  # lazy: vLLM >= 0.34 only
            register_speculative_method,
        )
    except ImportError:
        return False
    register_speculative_method(METHOD, CONFIG_CLASS)
    return True
