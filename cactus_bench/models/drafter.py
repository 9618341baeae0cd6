"""A small distilled drafter for SmolLM2-135M-Instruct that shares the verifier's embeddings.

The drafter is a plain ``LlamaForCausalLM`` with a few decoder layers (initialised from verifier
layers, e.g. 0, 1 and 29, then distilled) whose input embeddings are *the verifier's own module*
(shared, frozen) and whose output head is :class:`SubsetLMHead`: the verifier's tied head
restricted to the K token ids the drafter usefully proposes, plus a learned per-token bias.
Restricting the head cuts the 49152 x 576 matmul that otherwise dominates a draft step; the
head still returns full-vocabulary logits (``-inf`` outside the subset), so the drafter's
probabilities are exactly 0 there and the engine drives it like any causal LM (KV cache, crop).

Only the new parameters are committed (``assets/*.safetensors``, fp16): decoder layers, final
norm, head bias and the subset's token ids; the JSON config holds the head's ``logit_scale``
(a temperature calibration fitted after training by training.train).
Everything else is taken from the verifier at load.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

ASSET_DIR = Path(__file__).parent / "assets"
SMOLLM2_DRAFTER_WEIGHTS = ASSET_DIR / "smollm2_135m_drafter.safetensors"
SMOLLM2_DRAFTER_CONFIG = ASSET_DIR / "smollm2_135m_drafter.json"


def check_logit_scale(scale, where: str) -> None:
    """A logit scale must be a finite positive number (a JSON config may hold anything)."""
    number = isinstance(scale, int | float) and not isinstance(scale, bool)
    if not (number and math.isfinite(scale) and scale > 0):
        raise ValueError(f"{where}: logit_scale must be a positive number, not {scale!r}")


class SubsetLMHead(nn.Module):
    """Output head over a subset of the vocabulary, returning full-vocabulary logits.

    ``subset_weight`` [K, H] holds the verifier head rows for ``token_ids`` [K] (a frozen copy,
    not committed); ``bias`` [K] is learned. Logits outside the subset are ``-inf`` so that the
    drafter's distribution is exactly zero there. There is deliberately no ``weight`` attribute:
    code that reads ``get_output_embeddings().weight.shape[0]`` as the vocabulary size then
    falls back to ``config.vocab_size`` (the full vocabulary, which is what ``forward`` returns).

    ``logit_scale`` multiplies the logits that ``forward`` returns (not ``subset_logits``, which
    training uses): a distilled drafter comes out flatter than the teacher's processed law it is
    matched to (the forward-KL term spreads mass), and sharpening it raises the acceptance
    sum_x min(p, q). Any drafter law keeps speculative sampling exact; the scale is fitted on
    held-out training-split data (`training.train.calibrate`) and stored in the JSON config.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        token_ids: torch.Tensor,
        vocab_size: int,
        logit_scale: float = 1.0,
    ):
        super().__init__()
        check_logit_scale(logit_scale, "SubsetLMHead")
        if token_ids.ndim != 1 or weight.shape[0] != token_ids.shape[0]:
            raise ValueError(
                f"SubsetLMHead needs weight [K, H] and token_ids [K]; got {tuple(weight.shape)} "
                f"and {tuple(token_ids.shape)}"
            )
        if int(token_ids.max()) >= vocab_size or int(token_ids.min()) < 0:
            raise ValueError(f"SubsetLMHead token ids must lie in [0, {vocab_size})")
        self.vocab_size = vocab_size
        self.logit_scale = float(logit_scale)
        self.register_buffer("subset_weight", weight.detach().clone(), persistent=False)
        self.register_buffer("token_ids", token_ids.to(torch.long), persistent=False)
        self.bias = nn.Parameter(torch.zeros(token_ids.shape[0], dtype=weight.dtype))

    def subset_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, H] -> [B, T, K] logits over the subset (what training uses)."""
        return torch.nn.functional.linear(hidden, self.subset_weight, self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, H] -> [B, T, V] logits (times ``logit_scale``), ``-inf`` outside the subset."""
        return self.expand(self.subset_logits(hidden))

    def expand(self, small: torch.Tensor) -> torch.Tensor:
        """[B, T, K] subset logits -> [B, T, V] forward logits (scaled, ``-inf`` elsewhere)."""
        if self.logit_scale != 1.0:
            small = small * self.logit_scale
        full = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))
        full[..., self.token_ids] = small
        return full

    def packable_linear(self):
        """(weight [K, H], bias [K], finish) with ``forward(h) == finish(h @ weight.T + bias)``:
        what the engine's fast forward needs to run the product on oneDNN-packed weights
        (engine/packed_model.py), as it does for a plain ``nn.Linear`` head."""
        return self.subset_weight, self.bias, self.expand


def drafter_config(verifier_config: LlamaConfig, num_layers: int) -> LlamaConfig:
    """The verifier's config with fewer layers and untied embeddings (the head is replaced)."""
    cfg = verifier_config.to_dict()
    cfg.pop("quantization_config", None)
    cfg.pop("_name_or_path", None)
    cfg.update(num_hidden_layers=num_layers, tie_word_embeddings=False)
    return LlamaConfig(**cfg)


def build_drafter(
    verifier: LlamaForCausalLM,
    init_layers: tuple[int, ...] | list[int],
    token_ids: torch.Tensor,
) -> LlamaForCausalLM:
    """A drafter initialised from ``init_layers`` of ``verifier`` with a head over ``token_ids``.

    The input embedding module is shared with the verifier (no copy); layers and norm are copies.
    """
    vcfg = verifier.config
    if not all(0 <= i < vcfg.num_hidden_layers for i in init_layers):
        raise ValueError(
            f"init_layers {list(init_layers)} must lie in [0, {vcfg.num_hidden_layers})"
        )
    cfg = drafter_config(vcfg, len(init_layers))
    device = verifier.model.embed_tokens.weight.device
    dtype = verifier.model.embed_tokens.weight.dtype
    # Build on the meta device: the 49152 x 576 embedding and head would be thrown away anyway.
    with torch.device("meta"):
        drafter = LlamaForCausalLM(cfg)
    drafter.model.embed_tokens = verifier.model.embed_tokens
    for new_idx, src_idx in enumerate(init_layers):
        state = {
            k: v.detach().clone() for k, v in verifier.model.layers[src_idx].state_dict().items()
        }
        drafter.model.layers[new_idx].load_state_dict(state, assign=True)
        drafter.model.layers[new_idx].self_attn.layer_idx = new_idx
    norm_state = {k: v.detach().clone() for k, v in verifier.model.norm.state_dict().items()}
    drafter.model.norm.load_state_dict(norm_state, assign=True)
    drafter.model.rotary_emb = LlamaRotaryEmbedding(config=cfg)
    head_rows = verifier.get_output_embeddings().weight[token_ids.to(device)]  # [K, H]
    drafter.lm_head = SubsetLMHead(head_rows, token_ids.to(device), vcfg.vocab_size)
    drafter.to(device=device, dtype=dtype)
    drafter.eval()
    return drafter


def trainable_state(drafter: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """The parameters that are new in the drafter (everything except the shared embeddings)."""
    state = {f"layers.{k}": v for k, v in drafter.model.layers.state_dict().items()}
    state.update({f"norm.{k}": v for k, v in drafter.model.norm.state_dict().items()})
    state["head.bias"] = drafter.lm_head.bias.detach()
    return state


def save_drafter(
    drafter: LlamaForCausalLM, weights_path: Path, config_path: Path, meta: dict
) -> None:
    """Write the new parameters (fp16) and a small JSON config describing the drafter."""
    tensors = {
        k: v.detach().to("cpu", torch.float16).contiguous()
        for k, v in trainable_state(drafter).items()
    }
    tensors["head.token_ids"] = drafter.lm_head.token_ids.to("cpu", torch.int32).contiguous()
    weights_path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(weights_path))
    config = {
        "num_layers": drafter.config.num_hidden_layers,
        "vocab_size": drafter.config.vocab_size,
        "hidden_size": drafter.config.hidden_size,
        "subset_size": int(drafter.lm_head.token_ids.shape[0]),
        "logit_scale": drafter.lm_head.logit_scale,
        **meta,
    }
    config_path.write_text(json.dumps(config, indent=2) + "\n")


@functools.cache
def drafter_fingerprint(
    weights_path: Path = SMOLLM2_DRAFTER_WEIGHTS, config_path: Path = SMOLLM2_DRAFTER_CONFIG
) -> str:
    """12 hex digits of SHA-256 over the drafter's weights and the config fields that change its
    law (layers, subset, logit scale): a run's identity, so that results of an older drafter are
    never resumed as results of this one. "absent" when the files are missing."""
    if not weights_path.exists() or not config_path.exists():
        return "absent"
    config = json.loads(config_path.read_text())
    law = {key: config.get(key) for key in ("num_layers", "subset_size", "logit_scale")}
    digest = hashlib.sha256(weights_path.read_bytes())
    digest.update(json.dumps(law, sort_keys=True).encode())
    return digest.hexdigest()[:12]


def load_drafter(
    verifier: LlamaForCausalLM,
    weights_path: Path = SMOLLM2_DRAFTER_WEIGHTS,
    config_path: Path = SMOLLM2_DRAFTER_CONFIG,
) -> LlamaForCausalLM:
    """Rebuild the committed drafter on top of ``verifier`` (same device and dtype)."""
    if not weights_path.exists() or not config_path.exists():
        raise FileNotFoundError(
            f"drafter weights {weights_path} or config {config_path} missing; "
            "train them with `make drafter` (scripts/train_drafter.py)"
        )
    config = json.loads(config_path.read_text())
    if config["vocab_size"] != verifier.config.vocab_size or (
        config["hidden_size"] != verifier.config.hidden_size
    ):
        raise ValueError(
            f"drafter {weights_path.name} was trained for vocab {config['vocab_size']} / hidden "
            f"{config['hidden_size']}, but the verifier has {verifier.config.vocab_size} / "
            f"{verifier.config.hidden_size}; use the SmolLM2-135M-Instruct verifier"
        )
    tensors = load_file(str(weights_path))
    token_ids = tensors.pop("head.token_ids").to(torch.long)
    num_layers = config["num_layers"]
    # Initialise from the verifier's first layers (any will do: every weight is overwritten).
    drafter = build_drafter(verifier, list(range(num_layers)), token_ids)
    scale = config.get("logit_scale", 1.0)  # absent in configs written before the calibration
    check_logit_scale(scale, config_path.name)
    drafter.lm_head.logit_scale = float(scale)
    dtype = verifier.model.embed_tokens.weight.dtype
    device = verifier.model.embed_tokens.weight.device
    with torch.no_grad():
        for name, value in tensors.items():
            if name.startswith("layers."):
                target = drafter.model.layers.get_parameter(name.removeprefix("layers."))
            elif name.startswith("norm."):
                target = drafter.model.norm.get_parameter(name.removeprefix("norm."))
            elif name == "head.bias":
                target = drafter.lm_head.bias
            else:
                raise ValueError(f"unexpected tensor {name!r} in {weights_path}")
            target.copy_(value.to(device=device, dtype=dtype))
    return drafter
