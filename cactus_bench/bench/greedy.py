"""Greedy decoding as SamplingParams (the paper's law, `PAPER_SAMPLING`, is engine.sampling's)."""

from __future__ import annotations

from cactus_bench.engine.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
