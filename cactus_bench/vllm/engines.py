"""Building `vllm.LLM` engines for the runner (vLLM is imported only inside functions).

    from cactus_bench.vllm.engines import VllmOptions, build_llm, vllm_model_path
    llm = build_llm(vllm_model_path(verifier_id), drafter_id=vllm_model_path(drafter_id), m=2,
                    rule=parse_sampler({"name": "cactus", "delta": 1.0}), dtype="float32", seed=0,
                    options=VllmOptions(enforce_eager=True, cpu_threads=1))

The draft-model method samples drafts (`draft_sample_method="probabilistic"`), as the paper does;
a speculative engine records per-request spec-decode metrics ("detailed": the decoder's per-step
counts). `acceptance="vllm"` builds vLLM's own speculative sampling instead (no rule: vLLM's
rejection sampler and drafter law; "vllm_greedy": with vLLM's default argmax drafts). Every
engine runs on its line's model runner (V1 pinned on vllm <= 0.33; V2 on vllm >= 0.34, where a
rule's engine drafts through the registered method v2_law.METHOD) and is checked at start
(cactus_bench.vllm.runner).
Scripts that build an LLM need an `if __name__ == "__main__":` guard (vLLM starts its engine
with spawn).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from cactus_bench.models.registry import EMBEDDED_PREFIX, SMOLLM2_DRAFTER_ID, SMOLLM2_VERIFIER_ID
from cactus_bench.models.smollm2 import prepare_smollm2
from cactus_bench.samplers.params import RuleParams
from cactus_bench.vllm.acceptance import EXPAND_FIX_ENV, RULE_ENV, parse_rule_spec
from cactus_bench.vllm.conformance import require_installed
from cactus_bench.vllm.export import export_vllm_drafter
from cactus_bench.vllm.lines import V1, V2
from cactus_bench.vllm.runner import EXTENSION, check_workers, select_runner
from cactus_bench.vllm.v2_law import METHOD
from cactus_bench.vllm.working_set import CAP_ENV

CPU_KV_CACHE_GIB = 1.0  # KV cache per engine on vLLM's CPU platform unless backend.kv_cache_gib
GIB = 1 << 30
# The run's `acceptance` -> vLLM's draft_sample_method. "rule": the rule reads the drafter's law,
# so drafts are sampled (the paper samples drafts); "vllm": vLLM's own sampler on sampled drafts;
# "vllm_greedy": vLLM's default, argmax drafts read as point masses by its rejection sampler.
DRAFT_SAMPLE_METHODS = {"rule": "probabilistic", "vllm": "probabilistic", "vllm_greedy": "greedy"}


@dataclass
class VllmOptions:
    """configs/backend/vllm.yaml (BackendConf) fields that reach `vllm.LLM`."""

    gpu_memory_utilization: float = 0.85
    enforce_eager: bool = False
    tensor_parallel_size: int = 1
    max_model_len: int | None = None
    kv_cache_gib: float | None = None  # kv_cache_memory_bytes; None: vLLM's own sizing
    cpu_threads: int | None = None  # CPU platform: OpenMP threads (VLLM_CPU_OMP_THREADS_BIND)
    # requests decoded at once: the runner sends one at a time, and vLLM's default (256 on a
    # GPU) would size the sampler's start-up run for 256 x (m + 1) full-vocabulary rows that
    # memory.plan_memory does not reserve; a batched run sets its batch (and plans with it)
    batch: int = 1
    # the rule's bridge verifies each step in chunks of requests under this many GiB
    # (cactus_bench.vllm.working_set; memory.plan_memory reserves it)
    bridge_working_set_gib: float = 1.0


# ---- building the engine -------------------------------------------------------------------------
def speculative_config(
    drafter_id: str,
    m: int,
    drafter_revision: str | None = None,
    acceptance: str = "rule",
    line: str = V1,
) -> dict[str, Any]:
    """vLLM's draft-model speculation, with sampled drafts (the paper samples drafts; greedy
    drafts would pass the rule no drafter law) unless acceptance="vllm_greedy". A rule on the
    V2 line drafts through the registered method (the processed law, v2_law.py)."""
    config = {
        "method": METHOD if line == V2 and acceptance == "rule" else "draft_model",
        "model": drafter_id,
        "num_speculative_tokens": int(m),
        "draft_sample_method": DRAFT_SAMPLE_METHODS[acceptance],
    }
    if drafter_revision:
        config["revision"] = drafter_revision
    return config


def llm_kwargs(
    verifier_id: str,
    *,
    drafter_id: str | None,
    m: int,
    dtype: str,
    seed: int,
    options: VllmOptions,
    verifier_revision: str | None = None,
    drafter_revision: str | None = None,
    acceptance: str = "rule",
    line: str = V1,
) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` (pure, so tested without vLLM)."""
    kwargs: dict[str, Any] = {
        "model": verifier_id,
        "dtype": "auto" if dtype == "auto" else dtype,
        "seed": int(seed),
        "worker_extension_cls": EXTENSION,  # the start check's report (runner.py)
        "gpu_memory_utilization": options.gpu_memory_utilization,
        "enforce_eager": options.enforce_eager,
        "tensor_parallel_size": options.tensor_parallel_size,
        "max_num_seqs": int(options.batch),  # vLLM's word for the batch
        # the model's generation_config.json must not change the run's sampling: vLLM's own
        # defaults ("vllm"), whatever path a release takes to read them (the runner always
        # passes every sampling parameter too); conformance.py checks the argument exists
        "generation_config": "vllm",
    }
    if options.max_model_len:
        kwargs["max_model_len"] = int(options.max_model_len)
    if options.kv_cache_gib:
        kwargs["kv_cache_memory_bytes"] = int(options.kv_cache_gib * GIB)
    if verifier_revision:
        kwargs["revision"] = verifier_revision
    if drafter_id is not None:  # the verifier-only arm is an LLM without speculative_config
        kwargs["speculative_config"] = speculative_config(
            drafter_id, m, drafter_revision, acceptance, line
        )
        kwargs["per_request_spec_decode_metrics"] = "detailed"  # ordered per-step counts
    return kwargs


def build_llm(
    verifier_id: str,
    *,
    rule: RuleParams | None = None,
    acceptance: str = "rule",
    **kwargs,
):
    """A `vllm.LLM` on its line's runner, checked; the rule's typed parameters (`rule`, e.g.
    `parse_sampler({"name": "cactus", "delta": 1.0})`) are exported to RULE_ENV as their JSON
    before vLLM starts workers, which build the rule from them (`registry.build_rule`), and the
    start check demands that every worker read back the same parameters, guards included.

    The variable stays set for this process (a verifier-only engine has no rejection sampler to
    patch, so it is harmless there). `acceptance="vllm"` or "vllm_greedy" (no rule): vLLM's own
    speculative sampling; RULE_ENV is removed and EXPAND_FIX_ENV set, so the workers install
    only the CPU expand fix, and the start check proves no rule or drafter patch is in. On vLLM's
    CPU platform the KV cache defaults to CPU_KV_CACHE_GIB (vLLM would reserve
    gpu_memory_utilization x all RAM and refuse to start when less is free) and
    `options.cpu_threads` binds that many OpenMP threads to the first cores this process may
    use, unless VLLM_CPU_OMP_THREADS_BIND is set already.
    """
    if acceptance not in DRAFT_SAMPLE_METHODS:
        raise ValueError(f"acceptance must be one of {', '.join(DRAFT_SAMPLE_METHODS)}")
    vllm_own = acceptance != "rule"
    if vllm_own and rule is not None:
        raise ValueError(f"acceptance={acceptance} is vLLM's own sampler; pass rule=None")
    rule_name = rule_json = None
    options = kwargs.get("options") or VllmOptions()
    if rule is not None:
        rule_json = rule.to_json()
        rule_name = parse_rule_spec(rule_json).name  # the workers' build: fails here, not there
        os.environ[RULE_ENV] = rule_json
        if not options.bridge_working_set_gib > 0:
            raise ValueError("backend.bridge_working_set_gib must be > 0")
        os.environ[CAP_ENV] = repr(float(options.bridge_working_set_gib))
    if vllm_own:
        os.environ.pop(RULE_ENV, None)
        os.environ[EXPAND_FIX_ENV] = "1"
    line = select_runner()  # before vLLM reads its configuration (runner.py says why)
    label, line = require_installed(line)  # what the line patches is there: else one line
    from vllm import LLM  # lazy: vLLM is installed only in .venv-vllm
    from vllm.platforms import current_platform  # lazy: vLLM is installed only in .venv-vllm

    from cactus_bench.vllm.acceptance import register  # lazy: pulls in torch

    if current_platform.is_cpu():
        if not options.kv_cache_gib:
            options = replace(options, kv_cache_gib=CPU_KV_CACHE_GIB)
        if options.cpu_threads:
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_bind(options.cpu_threads))
    kwargs["options"] = options
    register()  # this process too (VLLM_ENABLE_V1_MULTIPROCESSING=0 runs the model here)
    arguments = llm_kwargs(verifier_id, acceptance=acceptance, line=line, **kwargs)
    if current_platform.is_cpu():
        # A prompt prefilled in chunks has its sampled token discarded, and vLLM (0.32) then
        # rewinds that request's seeded generator with get_offset/set_offset, which only CUDA
        # generators have: "CPU Generator does not use offset" kills the engine. Whole-prompt
        # prefills never discard (vLLM does the same on CPU for MLA models); vLLM then raises
        # the token budget to max_model_len.
        arguments["enable_chunked_prefill"] = False
    llm = LLM(**arguments)
    speculative = "speculative_config" in arguments
    cap = int(options.bridge_working_set_gib * GIB) if rule_name and speculative else None
    rule_json = rule_json if speculative else None
    check_workers(llm, rule_name if speculative else None, vllm_own and speculative, cap, rule_json)
    llm.cactus_rule = rule_name if speculative else None  # the decoder checks its counts
    llm.cactus_vllm = f"{label} ({line})"  # the release and line the rows record
    return llm


def cpu_bind(threads: int, allowed: Iterable[int] | None = None) -> str:
    """'0,1' : the first `threads` cores this process may run on (VLLM_CPU_OMP_THREADS_BIND)."""
    cores = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if not 1 <= threads <= len(cores):
        raise ValueError(f"threads={threads}, but this process may use {len(cores)} cores")
    return ",".join(str(core) for core in cores[:threads])


def vllm_model_path(model_id: str) -> str:
    """A model id vLLM can load: the embedded SmolLM2 pair becomes its cached HF folders.

    embedded:smollm2-135m-instruct -> the folder `make setup` writes; embedded:smollm2-135m-drafter
    -> its export with the 8192-id subset head (cactus_bench.vllm.export: the HF engine's law).
    Other embedded ids cannot run on vLLM (ValueError, one line).
    """
    if model_id == SMOLLM2_VERIFIER_ID:
        return str(prepare_smollm2())
    if model_id == SMOLLM2_DRAFTER_ID:
        return str(export_vllm_drafter())
    if model_id.startswith(EMBEDDED_PREFIX):
        raise ValueError(
            f"backend=vllm cannot load {model_id} (an in-memory model); use model=smollm2_135m "
            "or a hub id / local folder"
        )
    return model_id
