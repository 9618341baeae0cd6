"""The run configuration's schema: what `run.py` may be told, as typed dataclasses.

`RunConf` is registered in Hydra's ConfigStore as `base_config`; `configs/config.yaml` lists it
first in its defaults, so every group YAML merged on top of it is type-checked: a typo'd key (in
a YAML file or on the command line) or a value of the wrong type fails at composition, and
`checks.validate` then checks ranges and names before any model loads. Defaults of the sampling
settings come from the one source `cactus_bench.paper`.

The sampler node is an open mapping (`name` plus the rule's own parameters) checked against the
samplers' torch-free catalogue, so a new rule parameter needs no field here. `delta=` is the
command-line shortcut for `sampler.delta`: the sampler YAMLs read it with `${shortcut:delta,<own
value>}` while the config is composed, so the sampler node holds the one value in effect.

The top-level options (`m`, `seed`, `limit`, ...) are declared once, with their types, defaults
and checks, in `cactus_bench.run_settings`. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from cactus_bench.run.launch import register_resolvers
from cactus_bench.run_settings import OPTIONS

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
    bridge_working_set_gib: float = 1.0  # vllm: the rule bridge's memory cap (chunks under it)


@dataclass
class EngineConf:
    """The HF engine's forward path, identical for both arms: `engine.compile=off`."""

    fast: str = "auto"  # static KV cache + compact forward: auto | on | off
    compile: str = "auto"  # torch.compile of that forward: auto | on | off
    cuda_graphs: str = "auto"  # whole forwards as CUDA graphs: auto (CUDA) | on | off


@dataclass
class LoggerConf:
    name: str = "csv"
    project: str = "cactus-bench"  # W&B project (logger=wandb only)
    entity: str | None = None
    mode: str | None = None  # online | offline | disabled; None: offline without an API key


def _option_field(setting) -> tuple[str, Any, Any]:
    return (setting.key, setting.option.type, field(default=setting.option.default))


# The whole run: the config groups, then the top-level options of `cactus_bench.run_settings`
# (the command-line shortcuts `delta=0.5 m=20`), each declared once in that table. A plain
# dataclass like the others, built from the table so that no field list is kept by hand here.
RunConf = make_dataclass(
    "RunConf",
    [
        ("model", ModelConf, field(default=MISSING)),
        ("task", TaskConf, field(default=MISSING)),
        # {"name": <rule or "verifier">, **the rule's parameters}: configs/sampler/*.yaml
        ("sampler", dict[str, Any], field(default=MISSING)),
        ("backend", BackendConf, field(default=MISSING)),
        ("logger", LoggerConf, field(default=MISSING)),
        ("engine", EngineConf, field(default_factory=EngineConf)),
        *(_option_field(setting) for setting in OPTIONS),
    ],
    namespace={
        "__module__": __name__,  # pickles (submitit) and prints as cactus_bench.run.conf.RunConf
        "__doc__": "The whole run: the config groups and the run settings table's options.",
    },
)


SUBCONFS: dict[str, type] = {
    "model": ModelConf,
    "task": TaskConf,
    "backend": BackendConf,
    "engine": EngineConf,
    "logger": LoggerConf,
}


def shortcut(key: str, default: Any, *, _root_) -> Any:
    """`${shortcut:delta,1.0}` in a sampler YAML: the top-level `delta` when the command line
    set it, else the file's own value. The shortcut thus sets the sampler's own key while Hydra
    composes the config, and `--cfg job --resolve` shows the one value the run uses."""
    value = _root_.get(key)
    return default if value is None else value


def register_configs() -> None:
    """Register the schema as `base_config` and the resolvers; call before Hydra."""
    ConfigStore.instance().store(name="base_config", node=RunConf)
    if not OmegaConf.has_resolver("shortcut"):
        OmegaConf.register_new_resolver("shortcut", shortcut)
    register_resolvers()
