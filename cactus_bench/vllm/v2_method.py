"""The configuration of the registered speculative method cactus_bench.vllm.v2_law.METHOD.

vLLM resolves it in every process that builds a `SpeculativeConfig`; like vLLM's own config
modules it does not import the speculator (only its qualified name), which loads in the workers.
It is vLLM's draft-model method (`StandaloneARSpeculatorConfig`: base_method "draft_model",
the drafter's own vocabulary and positions) with cactus_bench's speculator class.
"""

from __future__ import annotations

from vllm.v1.worker.gpu.spec_decode.standalone_ar.config import StandaloneARSpeculatorConfig

from cactus_bench.vllm.v2_law import SPECULATOR_CLASS


class ProcessedLawSpeculatorConfig(StandaloneARSpeculatorConfig):
    """vLLM's standalone draft model, drafting from the processed law (v2_law.py)."""

    speculator_class = SPECULATOR_CLASS
