"""Per-draft costs outside the decoder layers: the token draw and the drafter's subset head.

    python scripts/bench_draw.py            # SmolLM2-135M's drafter if cached, else the tiny pair

A drafted token pays, besides the drafter's layers, for one draw from its processed law and one
output head. Timed here in isolation (warm caches; inside the decoding loop the verifier's pass
evicts the drafter's weights, so there each costs more):
- draw: `torch.multinomial(probs, 1)` (one exponential per vocabulary id) against the engine's
  `sample_token` (one uniform, inverse CDF on a CPU), on the paper's processed law (T 0.6,
  top-p 0.95, top-k 20) over the full vocabulary.
- head: the drafter's `SubsetLMHead` as a module (`F.linear` on plain weights, then the scatter to
  the full vocabulary) against the fast forward's packed head (oneDNN, same scatter), per dtype.
Medians and interquartile ranges of --repeats calls, CPU ms; `bench_forward.py` records them as
its "draw" section.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch

from cactus_bench.engine.packed_model import packed_model
from cactus_bench.engine.sampling import SamplingParams, process_logits, sample_token
from cactus_bench.paper import PAPER

PAPER_SAMPLING = SamplingParams(PAPER.temperature, PAPER.top_p, PAPER.top_k)


def spread_ms(call, repeats: int) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) CPU ms of `call()` over `repeats` calls after a warm-up."""
    for _ in range(max(3, repeats // 10)):
        call()
    return spread(cpu_times_ms(call, repeats))


def cpu_times_ms(call, repeats: int, clock=time.thread_time) -> list[float]:
    """CPU ms of each of `repeats` calls of `call()`, by `clock` (this thread's time by default;
    time.process_time where a library may run the work on threads of its own)."""
    samples = []
    for _ in range(repeats):
        start = clock()
        call()
        samples.append(1e3 * (clock() - start))
    return samples


def spread(samples: list[float]) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) of `samples` (at least two)."""
    quartiles = statistics.quantiles(samples, n=4)
    return statistics.median(samples), quartiles[0], quartiles[2]


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
            head, packed = drafter.lm_head, packed_model(drafter).head
            results["head", name, "module"] = spread_ms(partial(head, hidden), repeats)
            if packed is not None:
                results["head", name, "packed"] = spread_ms(partial(packed, hidden), repeats)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from bench_forward import DTYPES, load_models

    drafters = {name: load_models("auto", dtype)[1] for name, dtype in DTYPES.items()}
    for (part, dtype, way), (median, q25, q75) in bench_draw(drafters, args.repeats).items():
        print(f"{part:5s} {dtype:9s} {way:18s} {median:7.3f} ms  (IQR {q25:.3f}-{q75:.3f})")


if __name__ == "__main__":
    main()
