"""A decoder's linear layers packed for oneDNN (`cpu_kernels.PackedLinear`), fused where the
forward allows it, and shared by every `FastRunner` of the same model.

Per decoder layer: q, k and v fused into one product (and a Qwen2 model's biases with them),
the MLP's gate and up fused into one, o and down alone: 4 kernel calls instead of 7, each one
pass over its weights for any number of new tokens. The output head is packed when it is a
plain `nn.Linear` (tied or not) or offers `packable_linear()` (the drafter's `SubsetLMHead`);
other heads run as modules.

The packed copies cost as much memory as the weights they copy (270 MB for SmolLM2-135M in
bf16); the HF modules keep theirs (HF's forward, embeddings, norms). Packs are cached per model
and rebuilt when any parameter is replaced or edited in place (its data pointer or version
changes), which `FastRunner` checks once per request. With fp32 weights the packing also times
the MLP's gate/up products on 1..8 rows both ways (`cpu_kernels.time_rows`, ~1 s) and keeps the
row counts the packs win (`faster_rows`); bf16 weights always take the packs.

`merged_layers(model)`: the same fusion for the GPU path (and compiled layers), where oneDNN's
packs cannot run: q/k/v and gate/up each become one `F.linear` over one weight tensor (7
products a layer become 4, so 3 fewer kernel launches, each streaming its weights once). The
merge costs no memory: the modules' own parameters become views of the merged tensors (same
values, HF's forward unchanged). Two consequences: a `state_dict` then holds tensors sharing
storage (safetensors refuses or drops shared tensors: clone the model before saving it), and
a parameter replaced later (e.g. `model.to(...)`) is no longer a view, which `merged_layers`
notices (data pointers) and merges again.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from cactus_bench.engine.cpu_kernels import (
    PROBE_MIN_BYTES,
    PackedLinear,
    choose_packed_rows,
    time_rows,
)

_PACKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> PackedModel
_MERGED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> _Merged


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
    head: Callable | None  # [1, n, H] -> [1, n, V]; None: run model.lm_head as a module
    fingerprint: tuple
    faster_rows: frozenset[int] | None = None  # fp32: row counts 1..8 the packs won (measured)

    def packed_for(self, num_new: int) -> bool:
        """Whether "auto" runs a forward over `num_new` tokens on the packs: bf16 always; fp32
        the measured row counts, and never a prefill (> 8 rows: BLAS's GEMM, measured faster
        here on 600 rows)."""
        return self.faster_rows is None or num_new in self.faster_rows


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
    # Buffers too: a head may keep frozen weights as buffers (SubsetLMHead.subset_weight).
    tensors = [*model.parameters(), *model.buffers()]
    return tuple((t.data_ptr(), t._version) for t in tensors)


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
    faster_rows = None
    if model.model.embed_tokens.weight.dtype == torch.float32:  # measured: cpu_kernels docstring
        mlps = [layer.mlp for layer in model.model.layers[: model.config.num_hidden_layers]]
        pairs = zip(mlps, layers, strict=True)
        products = [((mlp.gate_proj, mlp.up_proj), packs.gate_up) for mlp, packs in pairs]
        size = sum(m.weight.nbytes for modules, _ in products for m in modules)
        # Weights that fit in a cache cannot show streaming behaviour: ATen up to 8 rows.
        faster_rows = (
            choose_packed_rows(*time_rows(products)) if size >= PROBE_MIN_BYTES else frozenset()
        )
    return PackedModel(layers, _pack_head(model.lm_head), fingerprint, faster_rows)


def _pack_head(head: torch.nn.Module):
    """A plain `nn.Linear` head (tied or not) as a `PackedLinear`; a head that offers
    `packable_linear() -> (weight, bias, finish)` (the drafter's `SubsetLMHead`: 8,192 of
    49,152 rows, then a scatter) as finish(packed product); any other head: None (module)."""
    if isinstance(head, torch.nn.Linear):
        return PackedLinear.of(head)
    parts = getattr(head, "packable_linear", None)
    if parts is None:
        return None
    weight, bias, finish = parts()
    product = PackedLinear([weight], [bias])
    return lambda hidden: finish(product(hidden))


class MergedLinear:
    """y = x W^T + b over weights merged along `out` ([sum of out, in]); the merged modules'
    parameters are views of `weight` and `bias` (module docstring)."""

    def __init__(self, modules: tuple[torch.nn.Linear, ...]):
        with torch.inference_mode(False), torch.no_grad():  # plain tensors: training still works
            self.weight = torch.cat([m.weight for m in modules])  # [sum of out, in]
            self.bias = None
            if any(m.bias is not None for m in modules):
                zero = [m.weight.new_zeros(m.out_features) for m in modules]
                biases = [m.bias if m.bias is not None else zero[i] for i, m in enumerate(modules)]
                self.bias = torch.cat(biases)  # [sum of out]
            offset = 0
            for module in modules:
                rows = module.out_features
                module.weight.data = self.weight[offset : offset + rows]
                if module.bias is not None:
                    module.bias.data = self.bias[offset : offset + rows]
                offset += rows
        if self.weight.device.type == "cuda":  # compiled graphs read them in place, uncopied
            for tensor in (self.weight, self.bias):
                if tensor is not None:
                    torch._dynamo.mark_static_address(tensor)
        self.modules = modules

    def views_intact(self) -> bool:
        """Whether every merged module still reads its weights from the merged tensor."""
        offset = 0
        for module in self.modules:
            if module.weight.data_ptr() != self.weight[offset].data_ptr():
                return False
            offset += module.out_features
        return True

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """[..., in] -> [..., sum of out]: the merged modules' outputs side by side."""
        return F.linear(x, self.weight, self.bias)


@dataclass
class MergedLayer:
    """A decoder layer's products as `decoder_layer` calls them (the `PackedLayer` interface)."""

    qkv: MergedLinear  # [H] -> [(H_q + 2 H_kv) * D]
    o: torch.nn.Module  # HF's o_proj
    gate_up: MergedLinear  # [H] -> [2 I]
    down: torch.nn.Module  # HF's down_proj
    act_fn: object


def merged_layers(model: torch.nn.Module) -> list[MergedLayer]:
    """Each decoder layer's q/k/v and gate/up merged (module docstring); built on first use and
    again when a parameter was replaced since. Needs `unpackable_reason(model)` to be None."""
    layers = _MERGED.get(model)
    if layers is not None and all(
        part.views_intact() for layer in layers for part in (layer.qkv, layer.gate_up)
    ):
        return layers
    layers = []
    for layer in model.model.layers[: model.config.num_hidden_layers]:
        attn, mlp = layer.self_attn, layer.mlp
        layers.append(
            MergedLayer(
                qkv=MergedLinear((attn.q_proj, attn.k_proj, attn.v_proj)),
                o=attn.o_proj,
                gate_up=MergedLinear((mlp.gate_proj, mlp.up_proj)),
                down=mlp.down_proj,
                act_fn=mlp.act_fn,
            )
        )
    _MERGED[model] = layers
    return layers
