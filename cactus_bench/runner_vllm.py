"""backend=vllm: the runner's measurement with vLLM engines for both arms (CPU build or CUDA).

The same task loop, baseline handling and summary as the HF path (cactus_bench.runner); only
the decoders differ: cactus_bench.vllm.engines builds them, cactus_bench.vllm.decoder drives
them, and the acceptance rule runs inside vLLM through cactus_bench.vllm.acceptance. Kept apart
so that runner.py reads top to bottom for the CPU path everyone runs.

Engine order matters: vLLM's counters live in one process-wide registry, and each `vllm.LLM`
built later unregisters the earlier engines' counters. So with baseline=interleave the
verifier-only engine is built FIRST and the speculative engine last (its AL and acceptance by
position stay readable); with baseline=cached the verifier-only engine is built only after the
speculative decode is finished.
"""

from __future__ import annotations

from cactus_bench.config import RunConf, is_speculative, sampler_params
from cactus_bench.runner import Measured, evaluate_and_summarise, warm_up


def measure_vllm(conf: RunConf) -> Measured:
    """backend=vllm: vLLM engines for both arms."""
    from types import SimpleNamespace

    from cactus_bench.engine import SamplingParams
    from cactus_bench.models.loading import load_tokenizer
    from cactus_bench.samplers import make_sampler
    from cactus_bench.vllm.decoder import VllmDecoder
    from cactus_bench.vllm.engines import VllmOptions, build_llm, vllm_model_path

    speculative = is_speculative(conf)
    params = sampler_params(conf.sampler)
    if speculative:
        make_sampler(conf.sampler.name, **params)  # a bad parameter fails before vLLM starts
    model = conf.model
    tokenizer = load_tokenizer(model.verifier, model.verifier_revision)
    verifier_path = vllm_model_path(model.verifier)
    drafter_path = vllm_model_path(model.drafter) if speculative else None
    pair = SimpleNamespace(  # what the task loop and the baseline cache read of a LoadedPair
        tokenizer=tokenizer,
        drafter_id=model.drafter,
        verifier_id=model.verifier,
        chat_template_kwargs=dict(model.chat_template_kwargs),
    )
    two_engines = speculative and conf.baseline in ("interleave", "cached")
    options = VllmOptions(
        gpu_memory_utilization=conf.backend.gpu_memory_utilization / (2 if two_engines else 1),
        enforce_eager=conf.backend.enforce_eager,
        tensor_parallel_size=conf.backend.tensor_parallel_size,
        max_model_len=conf.backend.max_model_len,
        kv_cache_gib=conf.backend.kv_cache_gib,
        cpu_threads=conf.threads,
    )
    sampling = SamplingParams(temperature=conf.temperature, top_p=conf.top_p, top_k=conf.top_k or 0)
    engines: dict = {}

    def make(spec: bool) -> VllmDecoder:
        if spec not in engines:
            engines[spec] = build_llm(
                verifier_path,
                rule=(conf.sampler.name, params) if spec else None,
                drafter_id=drafter_path if spec else None,
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
            sampler_name=conf.sampler.name if spec else None,
            sampling=sampling,
        )

    # The verifier-only engine first (see the module docstring), the speculative one last.
    interleaved = make(False) if speculative and conf.baseline == "interleave" else None
    decoder = make(speculative)
    warm_up([decoder, interleaved], tokenizer)

    return evaluate_and_summarise(conf, pair, decoder, interleaved, lambda: make(False))
