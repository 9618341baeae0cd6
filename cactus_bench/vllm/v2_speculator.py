"""vLLM V2's draft-model speculator, drafting from the processed law (vllm >= 0.34, GPU only).

`StandaloneARSpeculator.sample_draft` calls `compute_draft_logits(hidden_states, step)` and hands
the result to `gumbel_sample(..., apply_temperature=True, logits_cache=...)`: the drafts and the
`DraftLogitsCache` the rule reads both come from what compute_draft_logits returns. This
subclass returns those logits set to -inf outside each request's top-k / top-p
(cactus_bench.vllm.v2_law.processed_law_logits), so both are the processed law.

Where the per-request parameters come from, with stable addresses for CUDA graphs:
- the row -> request-state map: the `idx_mapping` argument of sample_draft (a view of the
  speculator's own `idx_mapping` buffer, -1 on padded rows), remembered for the call below;
- temperature: the speculator's own `temperature` buffer (vLLM copies it before drafting);
- top-k / top-p: `sampler.sampling_states` (vllm/v1/worker/gpu/sample/states.py) live in
  buffers that change address between steps, so `prepare_propose` (eager, before every
  propose) copies them into buffers of this class.
`cactus_law_calls` counts calls on the device, so CUDA-graph replays count too (the start
check's worker report reads it, cactus_bench.vllm.runner).
"""

from __future__ import annotations

import torch
from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

from cactus_bench.vllm.patches import CALLS
from cactus_bench.vllm.v2_law import processed_law_logits


class ProcessedLawSpeculator(StandaloneARSpeculator):
    cactus_draft_law = True  # the worker report's sign that this class drafts

    def __init__(self, vllm_config, device: torch.device):
        super().__init__(vllm_config, device)
        self.cactus_law_calls = torch.zeros((), dtype=torch.int64, device=device)
        self.cactus_top_k = torch.zeros(self.max_num_reqs, dtype=torch.int32, device=device)
        self.cactus_top_p = torch.ones(self.max_num_reqs, dtype=torch.float32, device=device)
        self.cactus_rows: torch.Tensor | None = None  # [R] request state of each drafted row

    def prepare_propose(self, input_batch, num_sampled, num_rejected, sampler) -> None:
        super().prepare_propose(input_batch, num_sampled, num_rejected, sampler)
        states = sampler.sampling_states
        self.cactus_top_k.copy_(states.top_k.gpu, non_blocking=True)
        self.cactus_top_p.copy_(states.top_p.gpu, non_blocking=True)

    def sample_draft(self, hidden_states, sample_src_positions, idx_mapping, *args, **kwargs):
        self.cactus_rows = idx_mapping
        return super().sample_draft(
            hidden_states, sample_src_positions, idx_mapping, *args, **kwargs
        )

    def compute_draft_logits(self, hidden_states: torch.Tensor, spec_step_idx: int):
        logits = super().compute_draft_logits(hidden_states, spec_step_idx)  # [R, V]
        rows = logits.shape[0]
        states = self.cactus_rows if self.cactus_rows is not None else self.idx_mapping
        CALLS["draft_law"] += 1  # Python calls (a graph replay does not come through here)
        self.cactus_law_calls.add_(1)
        return processed_law_logits(
            logits, states[:rows], self.temperature, self.cactus_top_k, self.cactus_top_p
        )
