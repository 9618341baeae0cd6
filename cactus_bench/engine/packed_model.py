"""A decoder's linear layers packed for oneDNN (`cpu_kernels.PackedLinear`), fused where the
forward allows it, and shared by every `FastRunner` of the same model.

Per decoder layer: q, k and v fused into one product (and a Qwen2 model's biases with them),
the MLP's gate and up fused into one, o and down alone: 4 kernel calls instead of 7, each one
pass over its weights for any number of new tokens. The output head is packed when it is a
plain `nn.Linear` (tied or not); other heads (e.g. the drafter's `SubsetLMHead`) run as modules.

The packed copies cost as much memory as the weights they copy (270 MB for SmolLM2-135M in
bf16); the HF modules keep theirs (HF's forward, embeddings, norms). Packs are cached per model
and rebuilt when any parameter is replaced or edited in place (its data pointer or version
changes), which `FastRunner` checks once per request.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from cactus_bench.engine.cpu_kernels import PackedLinear

_PACKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> PackedModel


@dataclass
class PackedLayer:
    qkv: PackedLinear  # [H] -> ([H_q * D], [H_kv * D], [H_kv * D])
    o: PackedLinear  # [H_q * D] -> [H]
    gate_up: PackedLinear  # [H] -> ([I], [I])
    down: PackedLinear  # [I] -> [H]
    act_fn: object  # the MLP's activation module (SiLU for Llama / Qwen)


@dataclass
class PackedModel:
    layers: list[PackedLayer]
    head: PackedLinear | None  # None: run model.lm_head as a module
    fingerprint: tuple


def unpackable_reason(model: torch.nn.Module) -> str | None:
    """None when every decoder layer has the Llama/Qwen projection modules, else why not."""
    for layer in model.model.layers[: model.config.num_hidden_layers]:
        attn, mlp = layer.self_attn, layer.mlp
        modules = [getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
        modules += [getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
        if not all(isinstance(m, torch.nn.Linear) for m in modules) or not hasattr(mlp, "act_fn"):
            return f"{type(layer).__name__} lacks Linear q/k/v/o and gate/up/down projections"
    return None


def packed_model(model: torch.nn.Module) -> PackedModel:
    """The packs of `model`, built on first use and rebuilt if its parameters changed."""
    fingerprint = _fingerprint(model)
    packs = _PACKS.get(model)
    if packs is None or packs.fingerprint != fingerprint:
        packs = _PACKS[model] = _pack(model, fingerprint)
    return packs


def _fingerprint(model: torch.nn.Module) -> tuple:
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _pack(model: torch.nn.Module, fingerprint: tuple) -> PackedModel:
    layers = []
    for layer in model.model.layers[: model.config.num_hidden_layers]:
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(
            PackedLayer(
                qkv=PackedLinear.of(attn.q_proj, attn.k_proj, attn.v_proj),
                o=PackedLinear.of(attn.o_proj),
                gate_up=PackedLinear.of(mlp.gate_proj, mlp.up_proj),
                down=PackedLinear.of(mlp.down_proj),
                act_fn=mlp.act_fn,
            )
        )
    head = model.lm_head if isinstance(model.lm_head, torch.nn.Linear) else None
    return PackedModel(layers, PackedLinear.of(head) if head is not None else None, fingerprint)
