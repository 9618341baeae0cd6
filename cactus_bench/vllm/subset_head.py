"""The embedded drafter's own law inside vLLM: Llama layers ending in the 8,192-id subset head.

The HF engine's drafter (cactus_bench.models.drafter.SubsetLMHead) computes

    logits(x) = s (W[S] h + b)[x]   for x in S (|S| = K = 8,192),   -inf outside S

with W the verifier's tied embedding [V, H], h [T, H] the drafter's last hidden state after its
final norm, b [K] the learned bias and s the fitted logit scale. vLLM's draft-model speculation
loads the drafter by the `architectures` entry of its folder's config.json through vLLM's model
registry, so this class (registered as ARCHITECTURE by cactus_bench.vllm.export) keeps vLLM's
Llama decoder and replaces only `compute_logits` with that formula: both backends then draft
from one law, and vLLM's temperature, top-k and top-p (the drafter-law patch) act on it as the
HF engine's sampling does.

vLLM imports this module only when it builds a model of that architecture (the registry holds
the "module:class" string), so the plugin that registers it stays free of vLLM's model code.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.models.llama import LlamaForCausalLM

from cactus_bench.vllm.export import BIAS, LOGIT_SCALE_KEY, SUBSET_SIZE_KEY, TOKEN_IDS


class SubsetHeadLlamaForCausalLM(LlamaForCausalLM):
    """vLLM's Llama with the drafter's subset head: the verifier's tied head restricted to K ids,
    plus a per-id bias, times a logit scale, -inf elsewhere."""

    def __init__(self, *, vllm_config, prefix: str = "", **kwargs):
        super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
        config = vllm_config.model_config.hf_config
        size = getattr(config, SUBSET_SIZE_KEY, None)
        scale = getattr(config, LOGIT_SCALE_KEY, None)
        if not isinstance(size, int) or size < 1 or not isinstance(scale, int | float):
            raise ValueError(
                f"{type(self).__name__} needs {SUBSET_SIZE_KEY} (int) and {LOGIT_SCALE_KEY} in "
                "config.json; re-export the drafter with scripts/export_vllm_drafter.py --force"
            )
        self.subset_scale = float(scale)
        # Buffers, not parameters: vLLM's loader checks that every parameter was loaded from the
        # checkpoint, and these are filled by load_weights below. Built on the model's device.
        self.register_buffer("subset_token_ids", torch.zeros(size, dtype=torch.long))  # [K]
        self.register_buffer("subset_bias", torch.zeros(size))  # [K], the model's dtype
        self.vocab_size = int(config.vocab_size)
        # On one rank the head is W[S] itself [K, H], copied once the weights are loaded, so a
        # draft step multiplies K rows, not V (49,152 for SmolLM2). Sharded or pipelined models go
        # through vLLM's logits processor (which gathers the vocabulary) and then pick S.
        self.one_rank = (
            get_tensor_model_parallel_world_size() == 1 and get_pp_group().world_size == 1
        )
        hidden = int(config.hidden_size)
        self.register_buffer("subset_weight", torch.zeros(size, hidden) if self.one_rank else None)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """[T, H] -> [T, V]: s (W[S] h + b) on the subset, -inf elsewhere."""
        if self.one_rank:
            small = hidden_states @ self.subset_weight.T  # [T, K]
        else:
            full = super().compute_logits(hidden_states)  # [T, V] (None off the last PP rank)
            if full is None:
                return None
            small = full[:, self.subset_token_ids]  # [T, K]
        small = (small + self.subset_bias) * self.subset_scale
        logits = small.new_full((small.shape[0], self.vocab_size), float("-inf"))  # [T, V]
        logits[:, self.subset_token_ids] = small
        return logits

    def compute_logits_local(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        """vLLM's un-gathered variant (model runner V2's sharded sampling): the same law."""
        return self.compute_logits(hidden_states)

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Greedy drafting (vLLM's local-argmax path) over the same law."""
        return self.compute_logits(hidden_states).argmax(dim=-1)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        head = {}

        def decoder_weights():
            for name, value in weights:
                if name in (TOKEN_IDS, BIAS):
                    head[name] = value
                else:
                    yield name, value

        loaded = super().load_weights(decoder_weights())
        if set(head) != {TOKEN_IDS, BIAS}:
            raise ValueError(
                f"the drafter folder lacks {sorted({TOKEN_IDS, BIAS} - set(head))}; re-export it "
                "with scripts/export_vllm_drafter.py --force"
            )
        ids, bias = head[TOKEN_IDS], head[BIAS]
        if ids.shape != self.subset_token_ids.shape or bias.shape != self.subset_bias.shape:
            raise ValueError(
                f"subset head tensors {tuple(ids.shape)} / {tuple(bias.shape)} do not match "
                f"{SUBSET_SIZE_KEY}={self.subset_token_ids.shape[0]} in config.json"
            )
        with torch.no_grad():
            self.subset_token_ids.copy_(ids.to(torch.long))
            self.subset_bias.copy_(bias.to(self.subset_bias.dtype))
            if self.one_rank:  # the tied embedding's rows of S (loaded above)
                rows = self.lm_head.weight[self.subset_token_ids]  # [K, H]
                self.subset_weight.copy_(rows.to(self.subset_weight.dtype))
        return loaded
