"""The embedded drafter in a layout vLLM loads: a plain Llama folder with a full-vocabulary head.

The HF engine's drafter (cactus_bench.models.drafter) shares the verifier's embeddings and ends
in `SubsetLMHead`: the verifier's tied head restricted to K token ids (8,192 in the committed
drafter) plus a learned per-token bias, times a fitted logit scale s, -inf elsewhere. vLLM's
draft-model speculation loads only architectures it knows (`LlamaForCausalLM` here) from a
folder, and its Llama head has no bias and no id subset. So the export keeps every committed
weight (decoder layers, final norm) and replaces the head by the verifier's full tied head:

    HF engine   q(x) = softmax(s (W[S] h + b))[x] for x in S (|S| = K), 0 outside S
    export      q(x) = softmax(W h)[x]          for every x in the 49,152-id vocabulary

(h: the drafter's last hidden state after its final norm; W: the verifier's embedding matrix;
the sampling temperature and top-k / top-p apply to both laws afterwards.) The bias, the
scale and the subset are dropped: the exported drafter is a different, untrained-head law, and
its acceptance differs (measured in the README). Both backends load the exported folder for the
cross-backend test, so they compare the same law.

Written to `<cache>/smollm2-135m-drafter-vllm/` (CACTUS_BENCH_CACHE or ~/.cache/cactus_bench),
never into the repository; a marker holds the SHA-256 of the committed drafter weights, so a new
drafter (make drafter) is re-exported on the next call.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from cactus_bench.models.smollm2 import cache_root, prepare_smollm2

EXPORT_DIR_NAME = "smollm2-135m-drafter-vllm"
MARKER = ".exported-from"
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "generation_config.json",
)


def export_dir(root: Path | None = None) -> Path:
    return (root or cache_root()) / EXPORT_DIR_NAME


def weights_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def export_full_vocab_drafter(
    out_dir: Path | None = None,
    *,
    verifier_dir: Path | None = None,
    weights_path: Path | None = None,
    config_path: Path | None = None,
    force: bool = False,
) -> Path:
    """Write (or reuse) the exported drafter folder; returns its path.

    Reuses the folder when its marker names the same drafter weights (unless `force`).
    """
    import torch  # lazy: keeps torch out of the command's start-up
    from safetensors.torch import load_file, save_file  # lazy: as torch

    from cactus_bench.models.drafter import (  # lazy: pulls in torch
        SMOLLM2_DRAFTER_CONFIG,
        SMOLLM2_DRAFTER_WEIGHTS,
    )

    out_dir = Path(out_dir) if out_dir is not None else export_dir()
    weights_path = Path(weights_path or SMOLLM2_DRAFTER_WEIGHTS)
    config_path = Path(config_path or SMOLLM2_DRAFTER_CONFIG)
    digest = weights_digest(weights_path)
    marker = out_dir / MARKER
    if not force and marker.exists() and marker.read_text().split()[0] == digest:
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
    drafter = load_file(str(weights_path))
    verifier = load_file(str(verifier_dir / "model.safetensors"))
    # [V, H] the verifier's embedding, tied to the exported head (the full-vocabulary law)
    state = {"model.embed_tokens.weight": verifier["model.embed_tokens.weight"].float()}
    for name, value in drafter.items():
        if name.startswith(("layers.", "norm.")):
            state[f"model.{name}"] = value.float()  # committed fp16 -> the verifier's fp32
        elif name not in ("head.bias", "head.token_ids"):  # the subset head is what is dropped
            raise ValueError(f"unexpected tensor {name!r} in {weights_path}")
    layers = {int(name.split(".")[2]) for name in state if name.startswith("model.layers.")}
    if layers != set(range(drafter_meta["num_layers"])):
        raise ValueError(f"{weights_path.name}: layers {sorted(layers)} do not match its config")

    config.update(
        num_hidden_layers=drafter_meta["num_layers"], tie_word_embeddings=True, dtype="float32"
    )
    partial = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    contiguous = {k: v.to(torch.float32).contiguous() for k, v in state.items()}
    save_file(contiguous, str(partial / "model.safetensors"), metadata={"format": "pt"})
    (partial / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (verifier_dir / name).exists():
            shutil.copy2(verifier_dir / name, partial / name)
    (partial / MARKER).write_text(f"{digest} {weights_path.name}\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    partial.rename(out_dir)
    return out_dir
