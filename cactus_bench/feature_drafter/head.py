"""The feature head: [token embedding ; verifier feature] -> one Llama decoder layer -> subset head.

At head position i the input is fc([e(s_{i+1}) ; f_i]) [H], with e the verifier's own (frozen,
shared) input embedding and f_i the verifier's last hidden state at position i (after its final
norm). One decoder layer of the verifier's width (initialised from the verifier's last layer)
and a norm (from the verifier's final norm) follow, then the verifier's tied head restricted to
K frequent token ids plus a learned bias (models.drafter.SubsetLMHead): the output at i is the
law of s_{i+2} (EAGLE-1, Li et al., 2024, one feature). Causal attention over earlier positions
lets the head see the features of the whole accepted prefix.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaForCausalLM

from cactus_bench.models.drafter import SubsetLMHead, build_drafter


class FeatureHead(nn.Module):
    """``forward(ids [B, T], features [B, T, H], mask [B, T]) -> subset logits [B, T, K]``.

    ``ids[:, i]`` is s_{i+1} and ``features[:, i]`` is f_i. The body is a one-layer
    ``LlamaForCausalLM`` fed through ``inputs_embeds`` (its mask, rotary embedding and KV cache
    machinery are the library's); its embedding module is the verifier's, never trained.
    """

    def __init__(self, verifier: LlamaForCausalLM, token_ids: torch.Tensor, init_layer: int = -1):
        super().__init__()
        layers = verifier.config.num_hidden_layers
        self.body = build_drafter(verifier, [init_layer % layers], token_ids)
        hidden = verifier.config.hidden_size
        self.fc = nn.Linear(2 * hidden, hidden, bias=True)
        self.body.to(verifier.dtype)
        self.fc.to(verifier.dtype)

    @property
    def lm_head(self) -> SubsetLMHead:
        return self.body.lm_head

    def fuse(self, ids: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """[B, T] ids and [B, T, H] features -> [B, T, H] decoder-layer inputs."""
        embedded = self.body.model.embed_tokens(ids)
        return self.fc(torch.cat([embedded, features.to(embedded.dtype)], dim=-1))

    def hidden(self, ids, features, mask=None, **kwargs) -> torch.Tensor:
        """[B, T, H] normed outputs of the decoder layer (kwargs: position_ids, cache, ...)."""
        inputs = self.fuse(ids, features)
        return self.body.model(inputs_embeds=inputs, attention_mask=mask, **kwargs)[0]

    def forward(self, ids, features, mask=None, **kwargs) -> torch.Tensor:
        return self.lm_head.subset_logits(self.hidden(ids, features, mask, **kwargs))

    def full_logits(self, ids, features, mask=None, **kwargs) -> torch.Tensor:
        """[B, T, V] logits times the head's logit scale, -inf outside the subset (the law the
        head would draft from, before temperature / top-k / top-p)."""
        return self.lm_head.expand(self.forward(ids, features, mask, **kwargs))

    def trainable_parameters(self) -> list[nn.Parameter]:
        """fc, the decoder layer, its norm and the head bias (embedding and head rows frozen)."""
        body = self.body.model
        params = [*self.fc.parameters(), *body.layers.parameters(), *body.norm.parameters()]
        return [*params, self.lm_head.bias]
