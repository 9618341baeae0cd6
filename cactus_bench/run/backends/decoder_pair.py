"""What every backend hands the measurement (`Decoders`), and the sampling both arms share.

The backends (hf.py, vllm.py) import this module, and the package's `load_decoders` imports
them: the shared parts sit here so that no backend imports its own package back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cactus_bench.run.conf import RunConf

if TYPE_CHECKING:
    from cactus_bench.engine.decoder import Decoder


@dataclass
class Decoders:
    """What a backend hands the measurement."""

    decoder: Decoder  # the run's own: speculative, or the verifier alone
    interleaved: Decoder | None  # verifier-only beside it, prompt by prompt (baseline=interleave)
    verifier_only: Callable[[], Decoder]  # builds the verifier-only decoder (baseline=cached)
    tokenizer: Any
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    per_phase_times: bool = True  # False: the backend times whole requests only


def sampling_params(conf: RunConf):
    """The engine's SamplingParams for the run (both arms, both backends)."""
    from cactus_bench.engine import SamplingParams  # lazy: keeps torch out of the checks

    return SamplingParams(temperature=conf.temperature, top_p=conf.top_p, top_k=conf.top_k or 0)
