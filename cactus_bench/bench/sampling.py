"""The sampling settings benchmarks decode with, from the one source of each value."""

from __future__ import annotations

from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.paper import PAPER

# The paper's processed law: temperature, then top-k, then top-p (PAPER.md, Notation).
PAPER_SAMPLING = SamplingParams(PAPER.temperature, PAPER.top_p, PAPER.top_k)
GREEDY = SamplingParams(temperature=0.0)
