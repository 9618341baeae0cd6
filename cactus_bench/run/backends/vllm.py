"""backend=vllm: vLLM engines for both arms, the acceptance rule patched into vLLM.

The same task loop, baseline handling and summary as backend=hf (cactus_bench.run.measure); only
the decoders differ: cactus_bench.vllm.decoder builds them, and the rule runs inside vLLM through
cactus_bench.vllm.acceptance.
"""

from __future__ import annotations

from cactus_bench.run.backends import VLLM_HINT, ConfigError, Decoders, sampling_params
from cactus_bench.run.conf import RunConf
from cactus_bench.run.identity import RunIdentity


def check_vllm(conf: RunConf) -> None:
    """One clear line unless vLLM imports and a device it runs on is there."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        raise ConfigError(VLLM_HINT) from None
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(VLLM_HINT)


def vllm_decoders(identity: RunIdentity) -> Decoders:
    """One `vllm.LLM` per arm, built on first use (the verifier-only one only when needed)."""
    from cactus_bench.models.loading import load_tokenizer
    from cactus_bench.vllm.decoder import VllmDecoder, VllmOptions, build_llm

    conf, model = identity.conf, identity.conf.model
    tokenizer = load_tokenizer(model.verifier, model.verifier_revision)
    two_engines = identity.speculative and conf.baseline in ("interleave", "cached")
    options = VllmOptions(
        gpu_memory_utilization=conf.backend.gpu_memory_utilization / (2 if two_engines else 1),
        enforce_eager=conf.backend.enforce_eager,
        tensor_parallel_size=conf.backend.tensor_parallel_size,
        max_model_len=conf.backend.max_model_len,
    )
    sampling = sampling_params(conf)
    engines: dict = {}

    def make(spec: bool) -> VllmDecoder:
        if spec not in engines:
            engines[spec] = build_llm(
                model.verifier,
                rule=(identity.sampler, identity.sampler_params) if spec else None,
                drafter_id=model.drafter if spec else None,
                m=conf.m,
                dtype=model.dtype,
                seed=conf.seed,
                options=options,
                verifier_revision=model.verifier_revision,
                drafter_revision=model.drafter_revision,
            )
        return VllmDecoder(
            engines[spec],
            tokenizer,
            num_draft_tokens=conf.m if spec else 0,
            sampler_name=identity.sampler if spec else None,
            sampling=sampling,
        )

    decoder = make(identity.speculative)
    interleave = identity.speculative and conf.baseline == "interleave"
    return Decoders(
        decoder=decoder,
        interleaved=make(False) if interleave else None,
        verifier_only=lambda: make(False),
        tokenizer=tokenizer,
        chat_template_kwargs=dict(model.chat_template_kwargs),
        per_phase_times=False,  # vLLM exposes no per-phase times: empty cells, not 0
    )
