"""The checks a composed configuration passes before anything loads, each failing in ONE line.

`validate(conf)` raises `ConfigError` (a ValueError) naming the fix for the first bad value: the
top-level options against their checks in the run settings table (cactus_bench.run_settings),
the config groups' values here, and the acceptance rule's parameters against the samplers'
torch-free catalogue (`rule_params_of`: the sampler node parsed once into the rule's typed
`RuleParams`, on every backend). Milliseconds, no torch: `run.py` calls them before it imports
anything heavy.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from cactus_bench.models.registry import DTYPES
from cactus_bench.run.conf import BACKEND_NAMES, ENGINE_SWITCHES, LOGGER_NAMES, RunConf
from cactus_bench.run.errors import one_line_error
from cactus_bench.run_settings import check_options
from cactus_bench.samplers.catalogue import NO_RULE, RULES, parse_sampler
from cactus_bench.samplers.params import RuleParams, did_you_mean
from cactus_bench.tasks.specs import TASK_NAMES


class ConfigError(ValueError):
    """A bad configuration; the message is one line that names the fix."""


def rule_params_of(conf: RunConf) -> RuleParams:
    """The sampler node parsed into the rule's typed parameters (`NO_RULE` for the verifier
    alone): the one check of rule parameters.

    The `delta=` shortcut reached `sampler.delta` while the config was composed (the sampler
    YAMLs read `${shortcut:delta,...}`); a Python-built config that sets both to different
    values is refused rather than silently preferring one."""
    try:
        rule_params = parse_sampler(conf.sampler)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    delta = rule_params.values().get("delta")
    if conf.delta is not None and delta is not None and delta != conf.delta:
        raise ConfigError(f"delta={conf.delta} and sampler.delta={delta} disagree; set one of them")
    return rule_params


def validate(conf: RunConf) -> RuleParams:
    """Raise ConfigError (one line) for the first bad value in `conf`; cheap, loads nothing.

    Returns the rule's checked parameters, which the run's identity and rule are built from."""
    rule_params = rule_params_of(conf)
    if conf.task.name not in TASK_NAMES:
        raise ConfigError(
            f"unknown task {conf.task.name!r}{did_you_mean(conf.task.name, TASK_NAMES)}; "
            f"choose one of {', '.join(TASK_NAMES)}"
        )
    _fail_if(not conf.model.name, "model.name is empty; every configs/model/*.yaml needs a name")
    complaint = check_options(conf)
    _fail_if(complaint is not None, str(complaint))
    _check_groups(conf)
    _check_choices(conf)
    _check_batch(conf)
    _check_acceptance(conf, rule_params)
    try:
        rule_params = rule_params.at_draft_length(conf.m)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    _fail_if(
        conf.backend.name == "vllm" and rule_params.values().get("test_law") == "unscaled",
        f"backend=vllm gives rules only the sampling laws p and q, not the temperature-1 laws "
        f"that sampler {rule_params.rule!r} reads with test_law=unscaled; set "
        "sampler.test_law=processed, or use backend=hf",
    )
    engine_only = sorted(set(rule_params.guards_set()) - {"near_top"})
    _fail_if(
        conf.backend.name == "vllm" and bool(engine_only),
        f"backend=vllm gives rules no stop ids or per-position mask, which "
        f"{', '.join(engine_only)} need; use backend=hf, or drop them (near_top runs on vLLM)",
    )
    return rule_params


def _check_batch(conf: RunConf) -> None:
    """batch > 1 on the HF engine needs its forward path that decodes rows together (vLLM
    batches with its own scheduler: max_num_seqs = batch)."""
    if conf.batch == 1:
        return
    _fail_if(
        conf.backend.name == "hf" and conf.engine.fast == "off",
        f"batch={conf.batch} needs the fast forward (static batched caches): engine.fast=off "
        "decodes one request at a time; set engine.fast=auto or batch=1",
    )


def _check_acceptance(conf: RunConf, rule_params: RuleParams) -> None:
    """acceptance=vllm / vllm_greedy is vLLM's own speculative sampling as it ships: its
    rejection sampler (SpS) with its drafter law, so only vLLM has it, and only SpS is it."""
    mode = conf.acceptance
    if mode == "rule":
        return
    _fail_if(
        conf.backend.name != "vllm",
        f"acceptance={mode} runs vLLM's own rejection sampler, which backend={conf.backend.name} "
        f"does not have; add backend=vllm (with .venv-vllm/bin/python) or drop acceptance={mode}",
    )
    _fail_if(
        rule_params == NO_RULE,
        f"acceptance={mode} is vLLM's own speculative sampling, but sampler=verifier drafts "
        f"nothing; set sampler=sps, or drop acceptance={mode} for the verifier alone",
    )
    _fail_if(
        rule_params.rule != "sps",
        f"acceptance={mode} runs vLLM's own SpS, not sampler {rule_params.rule!r}; set "
        f"sampler=sps, or drop acceptance={mode} to run {rule_params.rule} inside vLLM",
    )


def ignored_settings(conf: RunConf, rule_params: RuleParams) -> list[str]:
    """Warnings (one line each) for settings the run accepts but cannot use: a divergence budget
    (`delta=`) given to a rule without one, a batch larger than the prompts. Printed by run.py;
    never an error, so that a sweep such as `-m sampler=sps,cactus delta=0.5` still runs its
    SpS arm."""
    lines = []
    if conf.delta is not None and "delta" not in rule_params.values():
        budgeted = [name for name, info in RULES.items() if info.param("delta") is not None]
        lines.append(
            f"warning: sampler {rule_params.rule!r} has no divergence budget, so "
            f"delta={conf.delta} is ignored (rules with one: {', '.join(budgeted)})"
        )
    if conf.limit is not None and conf.batch > conf.limit:  # each repeat is one batched pass
        lines.append(
            f"warning: batch={conf.batch} but limit={conf.limit} prompts, so at most "
            f"{conf.limit} decode at once (the row records batch={conf.batch})"
        )
    return lines


def _check_groups(conf: RunConf) -> None:
    """The config groups' own values (the top-level options are checked by their table)."""
    backend = conf.backend
    for bad, line in (
        (conf.model.dtype not in DTYPES, f"model.dtype must be one of {', '.join(DTYPES)}"),
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
        ("backend", conf.backend.name, BACKEND_NAMES),
        ("logger", conf.logger.name, LOGGER_NAMES),
        ("engine.fast", conf.engine.fast, ENGINE_SWITCHES),
        ("engine.compile", conf.engine.compile, ENGINE_SWITCHES),
        ("engine.cuda_graphs", conf.engine.cuda_graphs, ENGINE_SWITCHES),
        ("logger.mode", conf.logger.mode, (None, "online", "offline", "disabled")),
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
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConf), values)
        conf = OmegaConf.to_object(merged)
    except Exception as error:  # OmegaConf's errors are multi-line
        raise ConfigError(one_line_error(error)) from error
    return conf
