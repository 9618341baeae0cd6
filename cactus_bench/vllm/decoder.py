"""backend=vllm: the paper's timing engine, driven one request at a time like Spec-Bench.

    from cactus_bench.vllm.decoder import VllmDecoder
    llm = cactus_bench.vllm.engines.build_llm(...)  # a speculative or verifier-only engine
    dec = VllmDecoder(llm, tokenizer, num_draft_tokens=10, sampler_name="cactus", sampling=sp)
    rec = dec.generate(prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None)

vLLM is imported only inside functions, so this module imports (and is tested) on CPU.

What is measured, and how (never invented):
- The acceptance rule runs inside vLLM through `cactus_bench.vllm.acceptance` (the
  `vllm.general_plugins` entry point reads CACTUS_BENCH_VLLM_RULE, set by `engines.build_llm`
  before vLLM starts its worker processes).
- The per-step counts are vLLM's per-request spec-decode metrics
  (`per_request_spec_decode_metrics="detailed"`, vLLM >= 0.32): each finished output carries
  `spec_decode_metrics.per_step_drafted` / `per_step_accepted`, one entry per verification step in
  decode order. They belong to the request, so two engines in one process, or the order they
  were built in, change nothing (the process-wide Prometheus counters that an earlier version
  read were reset by every new engine). A speculative request that emitted tokens but carries
  no metrics raises rather than report an empty AL.
- `draft_probs_fallbacks`: verification steps of this request that went to vLLM's own sampler
  because vLLM passed no draft probabilities (near max_model_len; cactus_bench.vllm.acceptance),
  read from the workers' reports (cactus_bench.vllm.runner) around the request.
- total_time_s is the wall time of `llm.generate`; vLLM does not expose per-phase times, so the
  runner writes the draft/verify/sampler/prefill columns as empty cells for this backend.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cactus_bench.engine.base import Request
from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.engine.stopping import cut_at_stop
from cactus_bench.vllm.runner import REPORT_METHOD


@dataclass
class VllmRequestRecord(RequestRecord):
    """A RequestRecord whose per-step lists are vLLM's per-request spec-decode metrics."""

    step_order: str = "decode"  # vLLM's per-step arrays are in decode order
    draft_probs_fallbacks: int = 0  # steps verified by vLLM's own sampler (no draft probs)


def steps_from_metrics(metrics, m: int) -> tuple[list[int], list[int]]:
    """(drafted_per_step, accepted_per_step) from an output's `spec_decode_metrics`.

    Raises ValueError when vLLM recorded no per-step arrays (summary level) or they contradict
    each other.
    """
    if metrics is None:
        raise ValueError("vLLM returned no spec_decode_metrics for a speculative request")
    drafted = [int(n) for n in metrics.per_step_drafted]
    accepted = [int(k) for k in metrics.per_step_accepted]
    if len(drafted) != len(accepted) or sum(metrics.histogram) != len(accepted):
        raise ValueError(
            f"vLLM's per-step spec-decode arrays ({len(drafted)} drafted, {len(accepted)} "
            f"accepted) do not match its {sum(metrics.histogram)} verification steps; run with "
            'per_request_spec_decode_metrics="detailed"'
        )
    if any(not 0 <= k <= n <= m for k, n in zip(accepted, drafted, strict=True)):
        raise ValueError(f"vLLM's per-step counts leave 0 <= accepted <= drafted <= m = {m}")
    return drafted, accepted


# ---- the decoder ---------------------------------------------------------------------------------
class VllmDecoder:
    """`generate(...) -> RequestRecord` like the HF decoders, one request per call."""

    def __init__(
        self,
        llm,
        tokenizer,
        *,
        num_draft_tokens: int,
        sampler_name: str | None,
        sampling: SamplingParams | None = None,
        eos_token_ids: Iterable[int] | None = None,
    ):
        self.llm = llm
        self.tokenizer = tokenizer
        self.num_draft_tokens = int(num_draft_tokens)  # 0 for the verifier-only arm
        self.sampler_name = sampler_name if num_draft_tokens else None
        self.sampling = sampling if sampling is not None else SamplingParams()
        self.eos_token_ids = None if eos_token_ids is None else sorted(set(eos_token_ids))

    def vllm_sampling(self, params: SamplingParams, max_new_tokens: int, stop, seed: int):
        from vllm import (
            SamplingParams as VllmSamplingParams,  # lazy: vLLM is installed only in .venv-vllm
        )

        return VllmSamplingParams(
            **sampling_kwargs(params, max_new_tokens, stop, seed, self.eos_token_ids)
        )

    def generate(
        self,
        prompt_ids: list[int],
        max_new_tokens: int,
        stop: list[str] | None = None,
        seed: int | None = None,
        sampling: SamplingParams | None = None,
    ) -> RequestRecord:
        """One request through `llm.generate` (engine.base.Decoder); the same argument
        handling as the HF decoders (engine.base.Request)."""
        request = Request.make(self, prompt_ids, max_new_tokens, stop, seed, sampling)
        params, stop = request.sampling, request.stop
        vllm_params = self.vllm_sampling(params, request.max_new_tokens, stop, request.seed)
        speculative = self.num_draft_tokens > 0
        before = draft_probs_fallbacks(self.llm) if speculative else None
        start = time.perf_counter()
        outputs = self.llm.generate(
            [{"prompt_token_ids": request.prompt_ids}], vllm_params, use_tqdm=False
        )
        total = time.perf_counter() - start
        completion = outputs[0].outputs[0]
        return self._record(
            request.prompt_ids, completion, params, request.seed, stop, total, before
        )

    def _record(self, prompt_ids, completion, params, seed, stop, total, before) -> RequestRecord:
        output_ids = list(completion.token_ids)
        text, cut = cut_at_stop(completion.text, stop or [])
        reason = stop_reason(completion.finish_reason, completion.stop_reason) or (
            "stop" if cut else "length"
        )
        common = {
            "prompt_ids": list(prompt_ids),
            "output_ids": output_ids,
            "text": text,
            "stop_reason": reason,
            "num_draft_tokens": self.num_draft_tokens,
            "total_time_s": total,
            "seed": seed,
            "sampler_name": self.sampler_name,
            "sampling": params.to_dict(),
        }
        if before is None:  # verifier only: one step per token
            n = len(output_ids)
            return RequestRecord(
                **common,
                drafted_per_step=[0] * n,
                accepted_per_step=[0] * n,
                emitted_per_step=[1] * n,
            )
        metrics = getattr(completion, "spec_decode_metrics", None)
        if metrics is None and len(output_ids) > 1:
            raise RuntimeError(
                "vLLM returned no per-request spec-decode metrics for a speculative request; "
                'build the engine with per_request_spec_decode_metrics="detailed" (engines.py)'
            )
        drafted, accepted = (
            steps_from_metrics(metrics, self.num_draft_tokens) if metrics else ([], [])
        )
        # vLLM records no entry for a step that verified no drafts (where none fit, at the end of
        # max_model_len or max_tokens); each emitted one token: kept as drafted 0 / accepted 0,
        # as the HF engine records them. The first output token comes from the prefill.
        missing = len(output_ids) - 1 - sum(a + 1 for a in accepted)
        drafted, accepted = drafted + [0] * max(0, missing), accepted + [0] * max(0, missing)
        return VllmRequestRecord(
            **common,
            drafted_per_step=drafted,
            accepted_per_step=accepted,
            emitted_per_step=[a + 1 for a in accepted],
            draft_probs_fallbacks=draft_probs_fallbacks(self.llm) - before,
        )


def draft_probs_fallbacks(llm) -> int:
    """Steps the bridge gave to vLLM's own sampler so far, summed over the engine's workers."""
    return sum(r["draft_probs_fallbacks"] for r in llm.collective_rpc(REPORT_METHOD))


def sampling_kwargs(params: SamplingParams, max_new_tokens, stop, seed, eos_token_ids) -> dict:
    """`vllm.SamplingParams` keyword arguments (pure). Temperature 0 is vLLM's greedy."""
    kwargs: dict[str, Any] = {
        "temperature": float(params.temperature),
        "top_p": float(params.top_p),
        "max_tokens": int(max_new_tokens),
        "seed": int(seed),
    }
    if params.top_k:
        kwargs["top_k"] = int(params.top_k)
    if stop:
        kwargs["stop"] = list(stop)
    if eos_token_ids:
        kwargs["stop_token_ids"] = list(eos_token_ids)
    return kwargs


def stop_reason(finish_reason: str | None, vllm_stop_reason) -> str | None:
    """vLLM's (finish_reason, stop_reason) -> "eos" | "stop" | "length" (None: unknown)."""
    if finish_reason == "length":
        return "length"
    if finish_reason == "stop":
        return "stop" if isinstance(vllm_stop_reason, str) else "eos"
    return None
