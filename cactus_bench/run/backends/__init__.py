"""The backend seam: each backend turns a run's identity and rule into `Decoders`.

hf    this project's engine over transformers models (cactus_bench.engine), CPU or GPU
vllm  vLLM engines with the rule patched into vLLM's rejection sampler (cactus_bench.vllm)

Every decoder implements `cactus_bench.engine.base.Decoder` (generate one request into a
RequestRecord), so the measurement (cactus_bench.run.measure) is the same for both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cactus_bench.run.checks import ConfigError
from cactus_bench.run.conf import RunConf

if TYPE_CHECKING:
    from cactus_bench.engine.base import Decoder
    from cactus_bench.run.identity import RunIdentity

VLLM_HINT = (
    "backend=vllm needs vLLM, which lives in its own environment: run `make setup-vllm "
    "TARGET=cpu` (or TARGET=gpu on a CUDA node), then "
    "run with .venv-vllm/bin/python; or use backend=hf here"
)


@dataclass
class Decoders:
    """What a backend hands the measurement."""

    decoder: Decoder  # the run's own: speculative, or the verifier alone
    interleaved: Decoder | None  # verifier-only beside it, prompt by prompt (baseline=interleave)
    verifier_only: Callable[[], Decoder]  # builds the verifier-only decoder (baseline=cached)
    tokenizer: Any
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    per_phase_times: bool = True  # False: the backend times whole requests only


def check_backend(conf: RunConf) -> None:
    """One clear line when the chosen backend cannot run here (before any model loads)."""
    if conf.backend.name == "hf":
        return
    from cactus_bench.run.backends.vllm import check_vllm  # lazy: cycle with run.backends.vllm

    check_vllm(conf)


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu."""
    if device != "auto":
        return device
    import torch  # lazy: keeps torch out of the config checks

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_decoders(identity: RunIdentity, rule) -> Decoders:
    """The backend's decoders for this run (models load here)."""
    if identity.conf.backend.name == "vllm":
        from cactus_bench.run.backends.vllm import vllm_decoders  # lazy: cycle, as above

        return vllm_decoders(identity)
    from cactus_bench.run.backends.hf import hf_decoders  # lazy: cycle with run.backends.hf; torch

    return hf_decoders(identity, rule)


def sampling_params(conf: RunConf):
    """The engine's SamplingParams for the run (both arms, both backends)."""
    from cactus_bench.engine import SamplingParams  # lazy: keeps torch out of the checks

    return SamplingParams(temperature=conf.temperature, top_p=conf.top_p, top_k=conf.top_k or 0)


__all__ = ["ConfigError", "Decoders", "VLLM_HINT", "check_backend", "load_decoders"]
