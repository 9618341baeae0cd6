"""The backend seam: each backend turns a run's identity and rule into `Decoders`.

hf    this project's engine over transformers models (cactus_bench.engine), CPU or GPU
vllm  vLLM engines with the rule patched into vLLM's rejection sampler (cactus_bench.vllm)

Every decoder implements `cactus_bench.engine.decoder.Decoder` (one request, or a batch of them,
into RequestRecords), so the measurement (cactus_bench.run.measure) is the same for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cactus_bench.run.backends.decoder_pair import Decoders
from cactus_bench.run.checks import ConfigError
from cactus_bench.run.conf import RunConf

if TYPE_CHECKING:
    from cactus_bench.run.identity import RunIdentity
    from cactus_bench.samplers.base import AcceptanceRule


def check_backend(conf: RunConf) -> None:
    """One clear line when the chosen backend cannot run here (before any model loads)."""
    if conf.backend.name == "hf":
        return
    from cactus_bench.run.backends.vllm import check_vllm  # lazy: only for backend=vllm

    check_vllm(conf)


def resolve_device(device: str) -> str:
    """`auto` -> cuda when available, else cpu."""
    if device != "auto":
        return device
    import torch  # lazy: keeps torch out of the config checks

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_decoders(identity: RunIdentity, rule: AcceptanceRule | None) -> Decoders:
    """The backend's decoders for this run (models load here); `rule` is None for the verifier
    alone, and unused by backend=vllm, whose workers build it from `identity.rule_params`."""
    if identity.conf.backend.name == "vllm":
        from cactus_bench.run.backends.vllm import vllm_decoders  # lazy: only for backend=vllm

        return vllm_decoders(identity)
    from cactus_bench.run.backends.hf import hf_decoders  # lazy: loads torch and transformers

    return hf_decoders(identity, rule)


__all__ = ["ConfigError", "Decoders", "check_backend", "load_decoders", "resolve_device"]
