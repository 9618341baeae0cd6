"""The paper's run settings (reference code MANGA-UOFA/Cactus; shared/reference PAPER.md): the one
place they are written. The run configuration's defaults, the tasks' generation kwargs and the
documentation all read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperSettings:
    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 20
    max_new_tokens: int = 4096  # lm-eval's max_gen_toks in the reference's --gen-kwargs
    m: int = 10  # draft length: tokens drafted per verification step
    seed: int = 1234  # numpy / torch / few-shot seed (the reference seeds `random` with 0)
    tasks: tuple[str, ...] = ("gsm8k", "ifeval", "gpqa")  # Table 1's columns, one row each
    max_model_len: int = 16384  # the reference's vLLM context (one engine per run, at 0.8)


PAPER = PaperSettings()
