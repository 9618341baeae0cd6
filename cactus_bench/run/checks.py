"""The checks a composed configuration passes before anything loads, each failing in ONE line.

`validate(conf)` raises `ConfigError` (a ValueError) naming the fix for the first bad value;
`sampler_choice(conf)` is the acceptance rule and its parameters as the run will use them (the
`delta=` shortcut applied), checked against the samplers' torch-free catalogue. Milliseconds,
no torch: `run.py` calls them before it imports anything heavy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf

from cactus_bench.models.registry import DTYPES
from cactus_bench.run.conf import (
    BACKEND_NAMES,
    BASELINE_MODES,
    ENGINE_SWITCHES,
    LOGGER_NAMES,
    RunConf,
)
from cactus_bench.samplers.catalogue import DELTA, RULES, VERIFIER_ONLY, check_params, rule_info
from cactus_bench.tasks.specs import TASK_NAMES, THINK_FILTERS

DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


class ConfigError(ValueError):
    """A bad configuration; the message is one line that names the fix."""


@dataclass(frozen=True)
class SamplerChoice:
    """The rule a run uses: its name ("verifier" = no speculation) and checked parameters."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def speculative(self) -> bool:
        return self.name != VERIFIER_ONLY


def sampler_choice(conf: RunConf) -> SamplerChoice:
    """The sampler node as the run uses it: `delta=` applied where the rule takes a budget."""
    node = dict(conf.sampler)
    name = node.pop("name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError("sampler.name is missing; pick one with sampler=<name> (e.g. cactus)")
    if conf.delta is not None:  # a budget even where the rule takes none: checked the same way
        try:
            DELTA.coerce("the delta= shortcut", conf.delta)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    if name == VERIFIER_ONLY:
        if node:
            raise ConfigError(f"sampler 'verifier' takes no parameters; remove {sorted(node)}")
        return SamplerChoice(name)
    try:
        info = rule_info(name)
        if conf.delta is not None and info.param("delta") is not None:
            node["delta"] = conf.delta  # the shortcut wins over the sampler YAML's value
        params = check_params(name, {k: v for k, v in node.items() if v is not None})
    except ValueError as error:
        raise ConfigError(str(error)) from None
    missing = [p.name for p in info.params if p.name not in params]
    if missing:
        raise ConfigError(
            f"sampler {name!r} needs {', '.join('sampler.' + m for m in missing)}; set it in "
            f"configs/sampler/{name}.yaml or on the command line"
        )
    return SamplerChoice(name, params)


def validate(conf: RunConf) -> SamplerChoice:
    """Raise ConfigError (one line) for the first bad value in `conf`; cheap, loads nothing.

    Returns the checked sampler choice, which the run's identity is built from."""
    choice = sampler_choice(conf)
    _fail_if(conf.m < 1, f"m (draft length) must be >= 1 (got {conf.m})")
    if conf.task.name not in TASK_NAMES:
        from cactus_bench.samplers.catalogue import _did_you_mean

        _fail_if(
            True,
            f"unknown task {conf.task.name!r}{_did_you_mean(conf.task.name, TASK_NAMES)}; "
            f"choose one of {', '.join(TASK_NAMES)}",
        )
    _fail_if(not conf.model.name, "model.name is empty; every configs/model/*.yaml needs a name")
    _check_ranges(conf)
    _check_choices(conf)
    _fail_if(
        conf.backend.name == "vllm" and choice.params.get("test_law") == "unscaled",
        f"backend=vllm gives rules only the sampling laws p and q, not the temperature-1 laws "
        f"that sampler {choice.name!r} reads with test_law=unscaled; set "
        "sampler.test_law=processed, or use backend=hf",
    )
    return choice


def ignored_settings(conf: RunConf, choice: SamplerChoice) -> list[str]:
    """Warnings (one line each) for settings the run accepts but cannot use: a divergence budget
    (`delta=`) given to a rule without one. Printed by run.py; never an error, so that a sweep
    such as `-m sampler=sps,cactus delta=0.5` still runs its SpS arm."""
    if conf.delta is None or "delta" in choice.params:
        return []
    budgeted = [name for name, info in RULES.items() if info.param("delta") is not None]
    return [
        f"warning: sampler {choice.name!r} has no divergence budget, so delta={conf.delta} is "
        f"ignored (rules with one: {', '.join(budgeted)})"
    ]


def _check_ranges(conf: RunConf) -> None:
    backend = conf.backend
    for bad, line in (
        (conf.model.dtype not in DTYPES, f"model.dtype must be one of {', '.join(DTYPES)}"),
        (conf.limit is not None and conf.limit < 1, "limit must be >= 1 or null for all prompts"),
        (conf.seed < 0, "seed must be >= 0"),
        (conf.repeats < 1, "repeats must be >= 1; 1 decodes each prompt once"),
        (conf.temperature < 0, "temperature must be >= 0; 0 means greedy"),
        (not 0 < conf.top_p <= 1, "top_p must be in (0, 1]; 1 disables nucleus filtering"),
        (conf.top_k is not None and conf.top_k < 0, "top_k must be >= 0 or null (0: off)"),
        (conf.max_new_tokens < 1, "max_new_tokens must be >= 1"),
        (conf.threads is not None and conf.threads < 1, "threads must be >= 1 or null"),
        (not conf.results_dir, "results_dir must name a folder for the results CSV"),
        (not DEVICE_PATTERN.match(conf.device), "device must be auto, cpu, mps, cuda or cuda:N"),
        (
            not 0 < backend.gpu_memory_utilization <= 1,
            "backend.gpu_memory_utilization must be in (0, 1]",
        ),
        (backend.tensor_parallel_size < 1, "backend.tensor_parallel_size must be >= 1"),
        (
            backend.max_model_len is not None and backend.max_model_len < 1,
            "backend.max_model_len must be >= 1 or null",
        ),
        (
            backend.kv_cache_gib is not None and not backend.kv_cache_gib > 0,
            "backend.kv_cache_gib must be > 0 or null",
        ),
    ):
        if bad:
            key = line.split(" must ")[0]
            raise ConfigError(f"{line} (got {_lookup(conf, key)!r})")


def _lookup(conf: RunConf, dotted: str) -> Any:
    value: Any = conf
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _check_choices(conf: RunConf) -> None:
    for key, value, known in (
        ("baseline", conf.baseline, BASELINE_MODES),
        ("backend", conf.backend.name, BACKEND_NAMES),
        ("logger", conf.logger.name, LOGGER_NAMES),
        ("engine.fast", conf.engine.fast, ENGINE_SWITCHES),
        ("engine.compile", conf.engine.compile, ENGINE_SWITCHES),
        ("logger.mode", conf.logger.mode, (None, "online", "offline", "disabled")),
        ("think_filter", conf.think_filter, THINK_FILTERS),
    ):
        if value not in known:
            names = ", ".join(str(k) for k in known)
            raise ConfigError(f"{key} must be one of {names} (got {value!r})")


def _fail_if(bad: bool, line: str) -> None:
    if bad:
        raise ConfigError(line)


def run_conf_from_dict(values: dict[str, Any]) -> RunConf:
    """Build a RunConf from plain nested dicts (the Python API, no Hydra). Types and unknown keys
    fail here in one line; the values are checked once, by `validate`, which `run()` calls
    before anything loads (call it yourself to check a config without running it)."""
    from cactus_bench.run.errors import one_line_error

    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConf), values)
        conf = OmegaConf.to_object(merged)
    except Exception as error:  # OmegaConf's errors are multi-line
        raise ConfigError(one_line_error(error)) from error
    return conf
