"""Per-draft costs outside the decoder layers: the token draw and the drafter's subset head.

A drafted token pays, besides the drafter's layers, for one draw from its processed law and one
output head. Timed here in isolation (warm caches; inside the decoding loop the verifier's pass
evicts the drafter's weights, so there each costs more):
- draw: `torch.multinomial(probs, 1)` (one exponential per vocabulary id) against the engine's
  `sample_token` (one uniform, inverse CDF on a CPU), on the paper's processed law (T 0.6,
  top-p 0.95, top-k 20) over the full vocabulary.
- head: the drafter's `SubsetLMHead` as a module (`F.linear` on plain weights, then the scatter to
  the full vocabulary) against the fast forward's packed head (oneDNN, same scatter), per dtype
  where oneDNN can pack that dtype on this CPU (`resolve_linear_kernel`).
Medians and interquartile ranges of `repeats` calls, CPU ms (scripts/bench_draw.py, and
bench_forward.py's "draw" section).
"""

from __future__ import annotations

from functools import partial

import torch

from cactus_bench.bench.timing import spread_ms
from cactus_bench.engine.cpu_kernels import resolve_linear_kernel
from cactus_bench.engine.packed_model import packed_model
from cactus_bench.engine.sampling import PAPER_SAMPLING, process_logits, sample_token


def bench_draw(drafters: dict[str, torch.nn.Module], repeats: int) -> dict[tuple, tuple]:
    """{(part, dtype, way): (median, q25, q75) CPU ms} for part in {draw, head}; `drafters`
    maps a dtype name to the drafter in that dtype (each shares its verifier's embedding, so
    one model is never cast to another dtype here)."""
    results = {}
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for name, drafter in drafters.items():
            hidden = torch.randn(1, 1, drafter.config.hidden_size, generator=generator)
            hidden = hidden.to(drafter.model.embed_tokens.weight.dtype)  # [1, 1, H]
            if name == "float32":  # the law is drawn in float32 whatever the models' dtype
                logits = drafter.lm_head(hidden)[:, -1]  # [1, V]: -inf off the subset
                probs = process_logits(logits, PAPER_SAMPLING)  # [1, V], <= 20 ids with mass
                results["draw", name, "torch.multinomial"] = spread_ms(
                    partial(torch.multinomial, probs, 1, generator=generator), repeats
                )
                results["draw", name, "sample_token"] = spread_ms(
                    partial(sample_token, probs, generator, greedy=False), repeats
                )
            head = drafter.lm_head
            results["head", name, "module"] = spread_ms(partial(head, hidden), repeats)
            dtype = drafter.model.embed_tokens.weight.dtype
            if resolve_linear_kernel("auto", torch.device("cpu"), dtype) != "onednn":
                continue  # e.g. bf16 on a CPU without AVX512-BW: oneDNN cannot pack it
            packed = packed_model(drafter).head
            if packed is not None:
                results["head", name, "packed"] = spread_ms(partial(packed, hidden), repeats)
    return results
