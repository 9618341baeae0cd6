"""The run configuration's schema: what `run.py` may be told, as typed dataclasses.

`RunConf` is registered in Hydra's ConfigStore as `base_config`; `configs/config.yaml` lists it
first in its defaults, so every group YAML merged on top of it is type-checked: a typo'd key (in
a YAML file or on the command line) or a value of the wrong type fails at composition, and
`checks.validate` then checks ranges and names before any model loads. Defaults of the sampling
settings come from the one source `cactus_bench.paper`.

The sampler node is an open mapping (`name` plus the rule's own parameters) checked against the
samplers' torch-free catalogue, so a new rule parameter needs no field here. `delta=` is the
command-line shortcut for `sampler.delta` (see `checks.sampler_choice`).

This module imports only omegaconf, the pair registry and the paper's settings: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from cactus_bench.paper import PAPER

BASELINE_MODES = ("interleave", "cached", "none")
BACKEND_NAMES = ("hf", "vllm")
LOGGER_NAMES = ("csv", "wandb")
ENGINE_SWITCHES = ("auto", "on", "off")


@dataclass
class ModelConf:
    """A drafter -> verifier pair (configs/model/<name>.yaml)."""

    name: str = MISSING
    drafter: str = MISSING
    verifier: str = MISSING
    drafter_revision: str | None = None
    verifier_revision: str | None = None
    dtype: str = "float32"
    max_context: int = 16384
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskConf:
    name: str = MISSING


@dataclass
class BackendConf:
    """hf: this project's engine. vllm: vLLM; the other fields reach vllm.LLM only."""

    name: str = "hf"
    gpu_memory_utilization: float = 0.85  # vllm: share of GPU memory per engine (both arms)
    enforce_eager: bool = False  # vllm: no CUDA graphs
    tensor_parallel_size: int = 1  # vllm: GPUs per engine
    max_model_len: int | None = None  # vllm: context cap (None: the model's own)
    kv_cache_gib: float | None = None  # vllm: KV cache per engine (None: GPU share; CPU 1 GiB)


@dataclass
class EngineConf:
    """The HF engine's forward path, identical for both arms: `engine.compile=off`."""

    fast: str = "auto"  # static KV cache + compact forward: auto | on | off
    compile: str = "auto"  # torch.compile of that forward: auto | on | off


@dataclass
class LoggerConf:
    name: str = "csv"
    project: str = "cactus-bench"  # W&B project (logger=wandb only)
    entity: str | None = None
    mode: str | None = None  # online | offline | disabled; None: offline without an API key


@dataclass
class RunConf:
    """The whole run. Top-level fields are the command-line shortcuts (`delta=0.5 m=20`)."""

    model: ModelConf = MISSING
    task: TaskConf = MISSING
    # {"name": <rule or "verifier">, **the rule's parameters}: configs/sampler/*.yaml
    sampler: dict[str, Any] = MISSING
    backend: BackendConf = MISSING
    logger: LoggerConf = MISSING
    engine: EngineConf = field(default_factory=EngineConf)
    experiment_name: str | None = None  # CSV is <results_dir>/<experiment_name or "runs">.csv
    delta: float | None = None  # shortcut: sets sampler.delta for the rules that take a budget
    m: int = PAPER.m  # draft length: tokens drafted per verification step
    limit: int | None = None  # first `limit` prompts of the task; None = all
    seed: int = PAPER.seed
    repeats: int = 1  # decodes per prompt, each with its own sampling seeds (both arms)
    temperature: float = PAPER.temperature
    top_p: float = PAPER.top_p
    top_k: int | None = PAPER.top_k
    max_new_tokens: int = PAPER.max_new_tokens
    device: str = "auto"  # auto = cuda when available, else cpu
    baseline: str = "interleave"  # interleave | cached | none
    baseline_dir: str | None = None  # BaselineCache folder; None = <results_dir>/baselines
    force: bool = False  # rerun even when a finished row with this config hash exists
    data_dir: str | None = None  # offline data folder (default: env CACTUS_BENCH_DATA)
    results_dir: str = "results"
    threads: int | None = None  # torch CPU threads; None = torch's default (all cores)
    # An unfinished <think> block (budget ran out): "paper" scores its text, tag removed, as the
    # reference code does; "strict" never scores unfinished reasoning (tasks/paper_settings.py).
    think_filter: str = "paper"


SUBCONFS: dict[str, type] = {
    "model": ModelConf,
    "task": TaskConf,
    "backend": BackendConf,
    "engine": EngineConf,
    "logger": LoggerConf,
}


def register_configs() -> None:
    """Register the schema as `base_config` and the launch resolvers; call before Hydra."""
    from hydra.core.config_store import ConfigStore

    from cactus_bench.run.launch import register_resolvers

    ConfigStore.instance().store(name="base_config", node=RunConf)
    register_resolvers()
