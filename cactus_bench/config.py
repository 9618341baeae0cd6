"""Structured-config schemas for `run.py` and the checks that run right after composition.

`RunConf` is registered in Hydra's ConfigStore as `base_config`; `configs/config.yaml` lists it
first in its defaults, so every group YAML merged on top of it is type-checked against these
dataclasses: a typo'd key (in a YAML file or on the command line) or a value of the wrong type
fails at composition. `validate` then checks ranges and names (delta >= 0, m >= 1, known sampler
and task names, ...) before any model loads. Every failure is a `ConfigError` (a ValueError)
whose message is ONE line naming the fix; `one_line_error` flattens Hydra's and OmegaConf's
multi-line messages the same way, for `run.py` to print.

This module imports only hydra/omegaconf (no torch): validation takes milliseconds.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, OmegaConf

from cactus_bench.frontier.conf import FrontierConf

# Names the layers below accept. Kept here (not imported) so that validating a config never
# imports torch or lm-eval; tests/test_configs.py checks they equal the layers' own lists.
SAMPLER_NAMES = ("sps", "cactus", "cactus_exact", "tas", "interp", "topk", "greedy")
VERIFIER_ONLY = "verifier"  # the sampler group's "no speculation" choice
TASK_NAMES = ("gsm8k", "ifeval", "gpqa", "demo")
BASELINE_MODES = ("interleave", "cached", "none")
BACKEND_NAMES = ("hf", "vllm")
LOGGER_NAMES = ("csv", "wandb")
ENGINE_SWITCHES = ("auto", "on", "off")
DTYPES = ("float32", "bfloat16", "float16", "auto")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")

# The hyper-parameters each acceptance rule takes (make_sampler's keyword arguments).
SAMPLER_PARAMS: dict[str, tuple[str, ...]] = {
    "sps": (),
    "greedy": (),
    "cactus": ("delta",),  # the Taylor rule (Corollary 5) is KL's
    "cactus_exact": ("delta", "divergence"),
    "tas": ("threshold", "alpha"),
    "interp": ("alpha",),
    "topk": ("k",),
    VERIFIER_ONLY: (),
}


class ConfigError(ValueError):
    """A bad configuration; the message is one line that names the fix."""


# ---- schemas ------------------------------------------------------------------------------------
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
class SamplerConf:
    """An acceptance rule; only the fields in SAMPLER_PARAMS[name] may be set."""

    name: str = MISSING
    delta: float | None = None  # divergence budget (cactus, cactus_exact); paper's δ
    divergence: str | None = None  # cactus_exact's f-divergence: kl reverse_kl chi2 hellinger tv
    threshold: float | None = None  # TAS epsilon
    alpha: float | None = None  # TAS alpha, or interp's weight on p
    k: int | None = None  # top-k acceptance


@dataclass
class BackendConf:
    """hf: this project's engine. vllm: vLLM (GPU); the other fields reach vllm.LLM only."""

    name: str = "hf"
    gpu_memory_utilization: float = 0.85  # vllm: share of GPU memory per engine (both arms)
    enforce_eager: bool = False  # vllm: no CUDA graphs
    tensor_parallel_size: int = 1  # vllm: GPUs per engine
    max_model_len: int | None = None  # vllm: context cap (None: the model's own)


@dataclass
class EngineConf:
    """The HF engine's forward path, identical for both arms (issue 8): `engine.compile=off`."""

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
    sampler: SamplerConf = MISSING
    backend: BackendConf = MISSING
    logger: LoggerConf = MISSING
    engine: EngineConf = field(default_factory=EngineConf)
    experiment_name: str | None = None  # CSV is <results_dir>/<experiment_name or "runs">.csv
    delta: float = 1.0  # shortcut read by the cactus sampler YAMLs
    m: int = 10  # draft length: tokens drafted per verification step
    limit: int | None = None  # first `limit` prompts of the task; None = all
    seed: int = 1234
    temperature: float = 0.6  # paper: T = 0.6, top-p 0.95, top-k 20
    top_p: float = 0.95
    top_k: int | None = 20
    max_new_tokens: int = 4096
    device: str = "auto"  # auto = cuda when available, else cpu
    baseline: str = "interleave"  # interleave | cached | none
    baseline_dir: str | None = None  # BaselineCache folder; None = <results_dir>/baselines
    force: bool = False  # rerun even when a finished row with this config hash exists
    data_dir: str | None = None  # offline data folder (default: env CACTUS_BENCH_DATA)
    results_dir: str = "results"
    threads: int | None = None  # torch CPU threads; None = torch's default (all cores)
    frontier: FrontierConf | None = None  # set by experiment=frontier: run.py measures it instead


def register_configs() -> None:
    """Register the schema as `base_config` and the resolvers; call before Hydra composes."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=RunConf)
    register_resolvers()


def run_conf_from_dict(values: dict[str, Any]) -> RunConf:
    """Build and validate a RunConf from plain nested dicts (the Python API, no Hydra)."""
    try:
        merged = OmegaConf.merge(OmegaConf.structured(RunConf), values)
        conf = OmegaConf.to_object(merged)
    except Exception as error:  # OmegaConf's errors are multi-line
        raise ConfigError(one_line_error(error)) from error
    validate(conf)
    return conf


# ---- validation ---------------------------------------------------------------------------------
def _fail(message: str) -> None:
    raise ConfigError(message)


def _check_sampler(sampler: SamplerConf) -> None:
    known = (*SAMPLER_NAMES, VERIFIER_ONLY)
    if sampler.name not in known:
        _fail(
            f"unknown sampler {sampler.name!r}{_did_you_mean(sampler.name, known)}; "
            f"choose one of {', '.join(known)}"
        )
    allowed = SAMPLER_PARAMS[sampler.name]
    for name in ("delta", "divergence", "threshold", "alpha", "k"):
        value = getattr(sampler, name)
        if value is not None and name not in allowed:
            takes = ", ".join(allowed) or "no parameters"
            _fail(
                f"sampler {sampler.name!r} does not take {name} (it takes {takes}); "
                f"remove sampler.{name}"
            )
        if value is None and name in allowed and name != "divergence":  # others have no default
            _fail(
                f"sampler {sampler.name!r} needs sampler.{name}; set it in "
                f"configs/sampler/{sampler.name}.yaml or on the command line"
            )
    if sampler.delta is not None and sampler.delta < 0:
        _fail(f"delta must be >= 0 (got {sampler.delta}): the divergence budget is in nats")
    if sampler.threshold is not None and not 0 < sampler.threshold <= 1:
        _fail(f"sampler.threshold (TAS epsilon) must be in (0, 1] (got {sampler.threshold})")
    if sampler.name == "tas" and sampler.alpha is not None and sampler.alpha <= 0:
        _fail(f"sampler.alpha (TAS) must be > 0 (got {sampler.alpha})")
    if sampler.name == "interp" and not 0 <= sampler.alpha <= 1:
        _fail(
            f"sampler.alpha (interp weight on the drafter) must be in [0, 1] (got {sampler.alpha})"
        )
    if sampler.k is not None and sampler.k < 1:
        _fail(f"sampler.k (top-k acceptance) must be >= 1 (got {sampler.k})")


def validate(conf: RunConf) -> None:
    """Raise ConfigError (one line) for the first bad value in `conf`; cheap, loads nothing."""
    if conf.delta < 0:
        _fail(f"delta must be >= 0 (got {conf.delta}): the divergence budget is in nats")
    if conf.m < 1:
        _fail(f"m (draft length) must be >= 1 (got {conf.m})")
    _check_sampler(conf.sampler)
    if conf.task.name not in TASK_NAMES:
        _fail(
            f"unknown task {conf.task.name!r}{_did_you_mean(conf.task.name, TASK_NAMES)}; "
            f"choose one of {', '.join(TASK_NAMES)}"
        )
    if not conf.model.name:
        _fail("model.name is empty; every configs/model/*.yaml needs a name")
    if conf.model.dtype not in DTYPES:
        _fail(f"model.dtype must be one of {', '.join(DTYPES)} (got {conf.model.dtype!r})")
    if conf.limit is not None and conf.limit < 1:
        _fail(f"limit must be >= 1 or null for the whole task (got {conf.limit})")
    if conf.seed < 0:
        _fail(f"seed must be >= 0 (got {conf.seed})")
    if conf.temperature < 0:
        _fail(f"temperature must be >= 0 (got {conf.temperature}); 0 means greedy")
    if not 0 < conf.top_p <= 1:
        _fail(f"top_p must be in (0, 1] (got {conf.top_p}); 1 disables nucleus filtering")
    if conf.top_k is not None and conf.top_k < 0:
        _fail(f"top_k must be >= 0 or null (got {conf.top_k}); 0 or null disables it")
    if conf.max_new_tokens < 1:
        _fail(f"max_new_tokens must be >= 1 (got {conf.max_new_tokens})")
    if not DEVICE_PATTERN.match(conf.device):
        _fail(f"device must be auto, cpu, mps, cuda or cuda:N (got {conf.device!r})")
    for key, value, known in (
        ("baseline", conf.baseline, BASELINE_MODES),
        ("backend", conf.backend.name, BACKEND_NAMES),
        ("logger", conf.logger.name, LOGGER_NAMES),
        ("engine.fast", conf.engine.fast, ENGINE_SWITCHES),
        ("engine.compile", conf.engine.compile, ENGINE_SWITCHES),
    ):
        if value not in known:
            _fail(f"{key} must be one of {', '.join(known)} (got {value!r})")
    if not 0 < conf.backend.gpu_memory_utilization <= 1:
        _fail(
            "backend.gpu_memory_utilization must be in (0, 1] "
            f"(got {conf.backend.gpu_memory_utilization})"
        )
    if conf.backend.tensor_parallel_size < 1:
        _fail(
            f"backend.tensor_parallel_size must be >= 1 (got {conf.backend.tensor_parallel_size})"
        )
    if conf.backend.max_model_len is not None and conf.backend.max_model_len < 1:
        _fail(f"backend.max_model_len must be >= 1 or null (got {conf.backend.max_model_len})")
    if conf.logger.mode not in (None, "online", "offline", "disabled"):
        _fail(f"logger.mode must be online, offline, disabled or null (got {conf.logger.mode!r})")
    if conf.threads is not None and conf.threads < 1:
        _fail(f"threads must be >= 1 or null for torch's default (got {conf.threads})")
    if not conf.results_dir:
        _fail("results_dir is empty; give a folder for the results CSV")
    if conf.frontier is not None:
        try:
            conf.frontier.check()
        except ValueError as error:
            raise ConfigError(str(error)) from None


# ---- what identifies a run ----------------------------------------------------------------------
def sampler_params(sampler: SamplerConf) -> dict[str, Any]:
    """make_sampler keyword arguments: only the parameters this rule takes and that are set."""
    return {
        name: getattr(sampler, name)
        for name in SAMPLER_PARAMS[sampler.name]
        if getattr(sampler, name) is not None
    }


def is_speculative(conf: RunConf) -> bool:
    return conf.sampler.name != VERIFIER_ONLY


def results_csv_name(conf: RunConf) -> str:
    return f"{conf.experiment_name or 'runs'}.csv"


def hash_fields(conf: RunConf) -> dict[str, Any]:
    """Every setting that changes what a run measures, and nothing else.

    Resume keys on config_hash(hash_fields(conf)). Parameters a sampler ignores are left out (so
    `sampler=sps delta=0.5` and `sampler=sps delta=1.0` are one run), and so is m for the
    verifier-only run. Paths, logger and `force` never change a measurement.
    """
    model = dataclasses.asdict(conf.model)
    return {
        "model": model,
        "task": conf.task.name,
        "limit": conf.limit,
        "seed": conf.seed,
        "sampler": conf.sampler.name,
        "sampler_params": sampler_params(conf.sampler),
        "m": conf.m if is_speculative(conf) else None,
        "temperature": conf.temperature,
        "top_p": conf.top_p,
        "top_k": conf.top_k,
        "max_new_tokens": conf.max_new_tokens,
        "device": conf.device,
        # hf keeps the bare name (earlier rows' hashes stay valid); vllm's options change timings
        "backend": conf.backend.name
        if conf.backend.name == "hf"
        else dataclasses.asdict(conf.backend),
        "engine": dataclasses.asdict(conf.engine),  # changes timings, so a separate run
        "threads": conf.threads,
        "baseline": conf.baseline if is_speculative(conf) else "none",
    }


# ---- one-line errors ----------------------------------------------------------------------------
def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _missing_config_line(message: str) -> str:
    # Hydra: "In 'config': Could not find 'sampler/cactis'\n\nAvailable options in 'sampler':..."
    found = re.search(r"Could not find '([^']+)'", message)
    options = re.findall(r"^\t(\S+)$", message, flags=re.MULTILINE)
    if not found:
        return ""
    wanted = found.group(1)
    group, _, choice = wanted.rpartition("/")
    line = f"unknown {group or 'config'} {choice!r}{_did_you_mean(choice, options)}"
    if options:
        line += f"; available: {', '.join(options)}"
    return line


def _not_in_struct_line(message: str, schema_keys) -> str:
    # OmegaConf: "Key 'detla' is not in struct\n    full_key: detla" or Hydra's
    # "Could not override 'detla'.\nTo append to your config use +detla=1\nKey 'detla' ..."
    key = re.search(r"Key '([^']+)' not in '\w+'|Key '([^']+)' is not in struct", message)
    if not key:
        return ""
    name = key.group(1) or key.group(2)
    full = re.search(r"full_key: (\S+)", message)
    full_key = full.group(1) if full else name
    parent = full_key.rpartition(".")[0]
    keys = schema_keys.get(parent, ())
    return f"unknown config key {full_key!r}{_did_you_mean(name, keys)}; check the spelling"


def _schema_keys() -> dict[str, tuple[str, ...]]:
    keys = {"": tuple(f.name for f in dataclasses.fields(RunConf))}
    for sub in ("model", "task", "sampler", "backend", "logger"):
        node = RunConf.__dataclass_fields__[sub].type
        cls = {
            "ModelConf": ModelConf,
            "TaskConf": TaskConf,
            "SamplerConf": SamplerConf,
            "BackendConf": BackendConf,
            "LoggerConf": LoggerConf,
        }[str(node)]
        keys[sub] = tuple(f.name for f in dataclasses.fields(cls))
    return keys


def one_line_error(error: BaseException) -> str:
    """Flatten a Hydra/OmegaConf/ConfigError message into one line that names the fix."""
    message = str(error).strip() or type(error).__name__
    cause = error.__cause__
    if cause is not None and str(cause).strip() and "full_key" in str(cause):
        message = f"{message}\n{cause}"
    for line in (_missing_config_line(message), _not_in_struct_line(message, _schema_keys())):
        if line:
            return line
    if "Traceback (most recent call last)" in message:
        # A job's error relayed with its traceback (submitit): keep the final "XError: ..." line.
        finals = re.findall(r"^(\w[\w.]*(?:Error|Exception|Interrupt)\b.*)$", message, re.M)
        if finals:
            return finals[-1].strip()
    lines = [part.strip() for part in message.splitlines() if part.strip()]
    full_key = next((p.split(":", 1)[1].strip() for p in lines if p.startswith("full_key:")), "")
    lines = [p for p in lines if not re.match(r"(full_key|object_type|reference_type)[:=]", p)]
    text = ": ".join([lines[0], " ".join(lines[1:])]) if len(lines) > 1 else " ".join(lines)
    if full_key and full_key not in text:
        text = f"{full_key}: {text}"
    return text


# ---- launch context -----------------------------------------------------------------------------
# The launching process pins these before Hydra starts any job, so that jobs (local processes,
# Slurm arrays starting hours later, possibly from a changed checkout) record the commit that was
# submitted and resolve relative paths against the folder run.py was started from.
GIT_SHA_ENV = "CACTUS_BENCH_GIT_SHA"  # read by cactus_bench.results.metadata.git_state
GIT_DIRTY_ENV = "CACTUS_BENCH_GIT_DIRTY"
LAUNCH_DIR_ENV = "CACTUS_BENCH_LAUNCH_DIR"


def pin_launch_context() -> None:
    """Record git sha, dirty flag and launch folder in the environment, unless already pinned."""
    if not os.environ.get(GIT_SHA_ENV):
        from cactus_bench.results.metadata import git_state

        sha, dirty = git_state()
        if sha:
            os.environ[GIT_SHA_ENV] = sha
            os.environ[GIT_DIRTY_ENV] = "" if dirty is None else str(dirty).lower()
    os.environ.setdefault(LAUNCH_DIR_ENV, os.getcwd())


def _git_sha_resolver() -> str:
    from cactus_bench.results.metadata import git_state

    return git_state()[0] or ""


def _git_dirty_resolver() -> str:
    from cactus_bench.results.metadata import git_state

    dirty = git_state()[1]
    return "" if dirty is None else str(dirty).lower()


def _launch_dir_resolver() -> str:
    return os.environ.get(LAUNCH_DIR_ENV, os.getcwd())


def register_resolvers() -> None:
    """`${git_sha:}`, `${git_dirty:}`, `${launch_dir:}` for the slurm launcher's setup lines.

    The launcher resolves its fields when Hydra instantiates it, in the launching process and
    before any job config exists (so `${hydra:...}` is not available there).
    """
    resolvers = (
        ("git_sha", _git_sha_resolver),
        ("git_dirty", _git_dirty_resolver),
        ("launch_dir", _launch_dir_resolver),
    )
    for name, resolver in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)


def resolve_path(path: str | None) -> str | None:
    """A relative path taken against the launch folder (see pin_launch_context), else as is."""
    if path is None or os.path.isabs(path):
        return path
    return os.path.join(os.environ.get(LAUNCH_DIR_ENV, os.getcwd()), path)
