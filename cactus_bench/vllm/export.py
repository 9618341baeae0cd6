"""The embedded drafter in a folder vLLM loads, with the HF engine's own law.

The HF engine's drafter (cactus_bench.models.drafter) shares the verifier's embeddings and ends
in `SubsetLMHead`: the verifier's tied head restricted to K token ids (8,192 in the committed
drafter) plus a learned per-token bias, times a fitted logit scale s, -inf elsewhere:

    q(x) = softmax(s (W[S] h + b))[x] for x in S (|S| = K), 0 outside S

(h: the drafter's last hidden state after its final norm; W: the verifier's embedding matrix;
the sampling temperature and top-k / top-p apply afterwards.) vLLM's draft-model speculation
loads a drafter folder through its model registry, by the `architectures` entry of config.json.
The export writes the decoder layers and final norm as a Llama checkpoint, the verifier's
embedding (tied to the head), the subset's ids and bias as two extra tensors, K and s in
config.json, and names ARCHITECTURE, which `register_architecture()` (called by the plugin,
cactus_bench.vllm.acceptance.register, in every vLLM process) maps to
cactus_bench.vllm.subset_head: the same law on both backends.

Written to `<cache>/smollm2-135m-drafter-vllm/` (CACTUS_BENCH_CACHE or ~/.cache/cactus_bench),
never into the repository; a marker holds the drafter's fingerprint (weights and the config
fields of its law) and the export format, so a new drafter (make drafter) or a new format is
re-exported on the next call.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cactus_bench.models.smollm2 import cache_root, prepare_smollm2

EXPORT_DIR_NAME = "smollm2-135m-drafter-vllm"
MARKER = ".exported-from"
EXPORT_FORMAT = "subset-head-1"  # in the marker: a folder of an older layout is re-exported
ARCHITECTURE = "CactusSubsetLlamaForCausalLM"
MODEL_CLASS = "cactus_bench.vllm.subset_head:SubsetHeadLlamaForCausalLM"  # imported lazily
# The subset head in the folder: two tensors beside the Llama checkpoint, two config.json keys
TOKEN_IDS, BIAS = "subset_head.token_ids", "subset_head.bias"
SUBSET_SIZE_KEY, LOGIT_SCALE_KEY = "cactus_subset_size", "cactus_logit_scale"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
)


def register_architecture() -> None:
    """Map ARCHITECTURE to the subset-head model in vLLM's registry (lazily: the registry keeps
    the "module:class" string). It adds a name nothing else uses, so no other model changes."""
    from vllm import ModelRegistry  # lazy: vLLM is installed only in .venv-vllm

    ModelRegistry.register_model(ARCHITECTURE, MODEL_CLASS)


def export_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / EXPORT_DIR_NAME


def export_vllm_drafter(
    out_dir: Path | None = None,
    *,
    verifier_dir: Path | None = None,
    weights_path: Path | None = None,
    config_path: Path | None = None,
    force: bool = False,
) -> Path:
    """Write (or reuse) the exported drafter folder; returns its path.

    Reuses the folder when its marker names the same drafter and format (unless `force`).
    """
    import torch  # lazy: keeps torch out of the command's start-up
    from safetensors.torch import load_file, save_file  # lazy: as torch

    from cactus_bench.models.drafter import (  # lazy: pulls in torch
        SMOLLM2_DRAFTER_CONFIG,
        SMOLLM2_DRAFTER_WEIGHTS,
        check_logit_scale,
        drafter_fingerprint,
    )

    out_dir = Path(out_dir) if out_dir is not None else export_dir()
    weights_path = Path(weights_path or SMOLLM2_DRAFTER_WEIGHTS)
    config_path = Path(config_path or SMOLLM2_DRAFTER_CONFIG)
    stamp = f"{drafter_fingerprint(weights_path, config_path)} {EXPORT_FORMAT}"
    marker = out_dir / MARKER
    if not force and marker.exists() and marker.read_text().startswith(stamp + " "):
        return out_dir
    verifier_dir = Path(verifier_dir) if verifier_dir is not None else prepare_smollm2()

    drafter_meta = json.loads(config_path.read_text())
    config = json.loads((verifier_dir / "config.json").read_text())
    if drafter_meta["vocab_size"] != config["vocab_size"] or (
        drafter_meta["hidden_size"] != config["hidden_size"]
    ):
        raise ValueError(
            f"drafter {weights_path.name} (vocab {drafter_meta['vocab_size']}, hidden "
            f"{drafter_meta['hidden_size']}) does not fit the verifier in {verifier_dir}; "
            "use the SmolLM2-135M-Instruct verifier"
        )
    scale = drafter_meta.get("logit_scale", 1.0)  # absent in configs before the calibration
    check_logit_scale(scale, config_path.name)
    drafter = load_file(str(weights_path))
    verifier = load_file(str(verifier_dir / "model.safetensors"))
    # [V, H] the verifier's embedding, tied to the head whose K rows the subset head reads
    state = {"model.embed_tokens.weight": verifier["model.embed_tokens.weight"].float()}
    for name, value in drafter.items():
        if name.startswith(("layers.", "norm.")):
            state[f"model.{name}"] = value.float()  # committed fp16 -> the verifier's fp32
        elif name == "head.bias":
            state[BIAS] = value.float()  # [K]
        elif name != "head.token_ids":
            raise ValueError(f"unexpected tensor {name!r} in {weights_path}")
    token_ids = drafter["head.token_ids"].to(torch.long)  # [K]
    if token_ids.shape != state[BIAS].shape:
        raise ValueError(f"{weights_path.name}: head.token_ids and head.bias differ in length")
    layers = {int(name.split(".")[2]) for name in state if name.startswith("model.layers.")}
    if layers != set(range(drafter_meta["num_layers"])):
        raise ValueError(f"{weights_path.name}: layers {sorted(layers)} do not match its config")

    config.update(
        architectures=[ARCHITECTURE],
        num_hidden_layers=drafter_meta["num_layers"],
        tie_word_embeddings=True,
        dtype="float32",
        **{SUBSET_SIZE_KEY: int(token_ids.shape[0]), LOGIT_SCALE_KEY: float(scale)},
    )
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tensors = {k: v.to(torch.float32).contiguous() for k, v in state.items()}
    tensors[TOKEN_IDS] = token_ids.contiguous()
    save_file(tensors, str(partial / "model.safetensors"), metadata={"format": "pt"})
    (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (verifier_dir / name).exists():
            shutil.copy2(verifier_dir / name, partial / name)
    (partial / MARKER).write_text(f"{stamp} {weights_path.name}\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)
    return out_dir
