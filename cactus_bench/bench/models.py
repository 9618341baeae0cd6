"""The models the benchmarks time: SmolLM2-135M and its drafter when cached, else tiny; or any
registered pair (bench_engine.py)."""

from __future__ import annotations

import torch

from cactus_bench.models import load_pair
from cactus_bench.models.smollm2 import smollm2_dir
from cactus_bench.models.tiny import make_tiny_pair

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def tiny_pair(dtype: torch.dtype, device: str = "cpu"):
    """(drafter, verifier, tokenizer): the tiny random pair (seed 0) on `device` in `dtype`."""
    drafter, verifier, tokenizer = make_tiny_pair(seed=0)
    return drafter.to(device, dtype), verifier.to(device, dtype), tokenizer


def load_models(choice: str, dtype: torch.dtype):
    """(name, drafter or None, verifier, tokenizer, model dir or None) in `dtype`; `choice` is
    auto (SmolLM2 if cached, else the tiny pair), smollm2 or tiny."""
    if choice in ("auto", "smollm2"):
        if (smollm2_dir() / "model.safetensors").exists():
            pair = load_pair("smollm2_135m", device="cpu", dtype=dtype)
            return "smollm2_135m", pair.drafter, pair.verifier, pair.tokenizer, smollm2_dir()
        if choice == "smollm2":
            raise SystemExit(f"{smollm2_dir()} is absent: run scripts/prepare_smollm2.py")
        print(f"SmolLM2 not cached at {smollm2_dir()}: benchmarking the tiny pair")
    return "tiny", *tiny_pair(dtype), None


def load_named_pair(name: str, device: str, dtype: str | None):
    """(drafter, verifier, tokenizer, token_map, chat_template_kwargs) of `name`: "tiny" (float32
    unless `dtype`) or a registered pair (its spec's dtype unless `dtype`)."""
    if name == "tiny":
        dtype_ = getattr(torch, dtype) if dtype else torch.float32
        return *tiny_pair(dtype_, device), None, {}
    pair = load_pair(name, device=device, dtype=dtype)
    return pair.drafter, pair.verifier, pair.tokenizer, pair.token_map, pair.chat_template_kwargs
