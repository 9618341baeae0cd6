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
- The counters live in one process-wide Prometheus registry, and every `vllm.LLM` built later
  in the process unregisters the earlier engines' counters: build the verifier-only engine
  first (the runner does); a speculative request whose counters did not move raises.
- Per request, the deltas of vLLM's cumulative counters around `llm.generate` (batch 1, nothing
  else running): vllm:spec_decode_num_drafts (verification steps with drafts),
  ..._num_draft_tokens, ..._num_accepted_tokens and ..._num_accepted_tokens_per_pos.
  The per-position vector gives the exact multiset of accepted counts per step
  (#steps accepting exactly k = per_pos[k-1] - per_pos[k]); the ORDER of steps is not
  recoverable, so per-step lists are written sorted (longest acceptance first) and the record
  says so (`step_order = "sorted"`). Every pooled metric of results.summarise (AL, tokens/step,
  acceptance rate and by position) depends only on that multiset, so it is exact. Drafted
  counts per step are exact when every step drafted m tokens (vLLM drafts fewer only near the
  context limit); otherwise `drafted_exact` is False and the shortfall is taken from the steps
  that accepted least (totals stay exact).
- total_time_s is the wall time of `llm.generate`; vLLM does not expose per-phase times, so the
  runner writes the draft/verify/sampler/prefill columns as empty cells for this backend.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from cactus_bench.engine.base import Request
from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.engine.stopping import cut_at_stop

SPEC_METRICS = {
    "drafts": "vllm:spec_decode_num_drafts",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens",
    "accepted": "vllm:spec_decode_num_accepted_tokens",
    "per_pos": "vllm:spec_decode_num_accepted_tokens_per_pos",
}


@dataclass
class VllmRequestRecord(RequestRecord):
    """A RequestRecord whose per-step lists were rebuilt from vLLM's counters (see above)."""

    step_order: str = "sorted"  # per-step lists are a sorted multiset, not in decode order
    drafted_exact: bool = True
    vllm_counters: dict[str, Any] = field(default_factory=dict)  # the raw per-request deltas


# ---- counters ------------------------------------------------------------------------------------
def spec_counters(metrics: Iterable) -> dict[str, Any]:
    """Sum vLLM's spec-decode counters over engines: {drafts, draft_tokens, accepted, per_pos}.

    `metrics` is `llm.get_metrics()`: objects with .name and .value (Counter) or .values (Vector).
    """
    totals: dict[str, Any] = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "per_pos": []}
    names = {name: key for key, name in SPEC_METRICS.items()}
    for metric in metrics:
        key = names.get(str(metric.name).removesuffix("_total"))
        if key == "per_pos":
            values = [int(v) for v in metric.values]
            grow = len(values) - len(totals["per_pos"])
            totals["per_pos"] += [0] * max(0, grow)
            for j, value in enumerate(values):
                totals["per_pos"][j] += value
        elif key is not None:
            totals[key] += int(metric.value)
    return totals


def counter_delta(before: dict, after: dict) -> dict[str, Any]:
    per_pos = [
        a - (before["per_pos"][j] if j < len(before["per_pos"]) else 0)
        for j, a in enumerate(after["per_pos"])
    ]
    return {
        "drafts": after["drafts"] - before["drafts"],
        "draft_tokens": after["draft_tokens"] - before["draft_tokens"],
        "accepted": after["accepted"] - before["accepted"],
        "per_pos": per_pos,
    }


def steps_from_counters(delta: dict, m: int) -> tuple[list[int], list[int], bool]:
    """(drafted_per_step, accepted_per_step, drafted_exact) from one request's counter deltas.

    Accepted counts: the exact multiset, sorted descending. Raises ValueError when the counters
    contradict each other (e.g. another request ran concurrently).
    """
    steps, drafted_total = int(delta["drafts"]), int(delta["draft_tokens"])
    per_pos = [int(v) for v in delta["per_pos"][:m]] + [0] * max(0, m - len(delta["per_pos"]))
    survivors = [steps, *per_pos, 0]  # survivors[k] = #steps accepting >= k
    if any(b > a for a, b in pairwise(survivors)) or min(survivors) < 0:
        raise ValueError(f"inconsistent spec-decode counters {delta}: per-position counts rise")
    accepted: list[int] = []
    for k in range(m, -1, -1):
        accepted += [k] * (survivors[k] - survivors[k + 1])
    if sum(accepted) != int(delta["accepted"]):
        raise ValueError(
            f"inconsistent spec-decode counters {delta}: per-position counts sum to "
            f"{sum(accepted)}, accepted tokens to {delta['accepted']}"
        )
    drafted = [m] * steps
    shortfall = m * steps - drafted_total
    if shortfall < 0:
        raise ValueError(f"inconsistent spec-decode counters {delta}: more drafts than m per step")
    for i in range(steps - 1, -1, -1):  # take drafts back from the steps that accepted least
        cut = min(shortfall, drafted[i] - accepted[i])
        drafted[i] -= cut
        shortfall -= cut
    if shortfall:
        raise ValueError(f"inconsistent spec-decode counters {delta}: fewer drafts than accepts")
    return drafted, accepted, drafted_total == m * steps


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
        from vllm import SamplingParams as VllmSamplingParams

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
        before = spec_counters(self.llm.get_metrics()) if speculative else None
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
        delta = counter_delta(before, spec_counters(self.llm.get_metrics()))
        if len(output_ids) > 1 and delta["drafts"] == 0:
            raise RuntimeError(
                "vLLM's spec-decode counters did not move for a speculative request: a second "
                "vllm.LLM built later in this process unregisters the first one's metrics; "
                "build the verifier-only engine first"
            )
        drafted, accepted, exact = steps_from_counters(delta, self.num_draft_tokens)
        return VllmRequestRecord(
            **common,
            drafted_per_step=drafted,
            accepted_per_step=accepted,
            emitted_per_step=[a + 1 for a in accepted],
            drafted_exact=exact,
            vllm_counters=delta,
        )


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
