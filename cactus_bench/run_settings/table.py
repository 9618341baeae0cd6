"""The table of the run's settings, `RUN_SETTINGS`, and the values a run derives from it.

One line per setting (what a line holds: setting.py); the package docstring says who reads it.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from typing import Any

from cactus_bench.paper import PAPER
from cactus_bench.run_settings.setting import UNSET, Check, Option, Setting, at_least, one_of
from cactus_bench.samplers.catalogue import PARAM_COLUMNS
from cactus_bench.tasks.specs import THINK_FILTERS

BASELINE_MODES = ("interleave", "cached", "none")
# Who decides which drafts survive: the run's rule (on vLLM, installed in its rejection sampler,
# drafts from the processed law), or vLLM's own speculative sampling as it ships (its rejection
# sampler and drafter law: sampled drafts from softmax(logits / T), or its default argmax drafts).
ACCEPTANCE_MODES = ("rule", "vllm", "vllm_greedy")
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def _opt(kind: Any, default: Any, check: Check | None = None, key: str = "") -> Option:
    return Option(kind, default, check, key)


RUN_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "experiment",
        "experiment preset name, e.g. table1_qwen3_14b; the CSV is "
        "<results_dir>/<experiment_name or runs>.csv",
        _opt(str | None, None, key="experiment_name"),
        hashed=False,
    ),
    # the pair: the whole model node (ids, revisions, dtype, context, chat kwargs) is hashed
    Setting("model", "the model node (configs/model/)", source="conf.model", column=None),
    Setting(
        "model_pair",
        "pair name from cactus_bench.models.PAIR_NAMES",
        source="conf.model.name",
        kind="str",
        hashed=False,
        grouped=True,
    ),
    Setting(
        "drafter_id",
        "drafter checkpoint id; empty for a verifier-only run",
        source="conf.model.drafter",
        kind="str",
        hashed=False,
        verifier_value=None,
    ),
    Setting(
        "verifier_id",
        "verifier checkpoint id",
        source="conf.model.verifier",
        kind="str",
        hashed=False,
        baseline="verifier_id",
    ),
    Setting(
        "verifier_revision",
        "the verifier's hub revision",
        source="conf.model.verifier_revision",
        hashed=False,
        column=None,
        baseline="sampling.verifier_revision",
    ),
    # the commit an unpinned revision resolved to: after the hub moves main, not reused
    Setting(
        "verifier_commit",
        "the commit the verifier's revision resolved to",
        source="verifier_commit",
        hashed=False,
        column=None,
        unhashed=None,
        baseline="sampling.verifier_commit",
    ),
    # hf: the bare name (older rows keep their hashes); vllm: its options change timings
    Setting("backend", "the backend node", source="hashed_backend", column=None),
    Setting("backend", "hf | vllm", source="conf.backend.name", kind="str", hashed=False),
    # the dtype the models ran in, `auto` resolved for this device
    Setting(
        "dtype",
        "dtype the models ran in",
        source="dtype",
        kind="str",
        hashed=False,
        baseline="sampling.dtype",
    ),
    # dtype=auto is bf16 on one CPU and fp32 on another: hashed as resolved (a set dtype is
    # in `model` already)
    Setting(
        "resolved_dtype",
        "model.dtype=auto as resolved",
        source="auto_dtype",
        column=None,
        unhashed=None,
    ),
    Setting(
        "task",
        "gsm8k | ifeval | gpqa | demo",
        source="conf.task.name",
        kind="str",
        baseline="task",
        grouped=True,
    ),
    Setting(
        "sampler",
        "an acceptance rule of cactus_bench.samplers.SAMPLER_NAMES, or verifier (no drafts)",
        source="sampler",
        kind="str",
        grouped=True,
    ),
    # the rule's params(): {} for the verifier in the hash, an empty cell in the row
    Setting("sampler_params", "the rule's params()", source="sampler_params", column=None),
    Setting(
        "sampler_params",
        "every parameter of the acceptance rule, as its params() gives them (a new parameter "
        "without a column of its own shows here)",
        source="sampler_params",
        kind="json",
        hashed=False,
        grouped=True,
        verifier_value=None,
    ),
    # rows written before the setting existed ran the rule: "rule" rows keep their hashes
    Setting(
        "acceptance",
        "who decides acceptance: rule (the sampler's rule; on vLLM installed in its rejection "
        "sampler, drafts from the processed law) | vllm (backend=vllm, sampler=sps: vLLM's own "
        "rejection sampler and drafter law, drafts sampled from softmax(logits / T), no rule or "
        "drafter patch) | vllm_greedy (the same with vLLM's default argmax drafts); empty in "
        "rows before it existed (rule)",
        _opt(str, "rule", one_of(ACCEPTANCE_MODES)),
        unhashed="rule",
        grouped=True,
    ),
    Setting(
        "m",
        "draft length (tokens drafted per step)",
        _opt(int, PAPER.m, at_least(1)),
        grouped=True,
        verifier_value=None,
    ),
    Setting(
        "temperature",
        "sampling temperature (0 = greedy)",
        _opt(float, PAPER.temperature, Check(">= 0", lambda v: v >= 0)),
        baseline="sampling.temperature",
        grouped=True,
    ),
    Setting(
        "top_p",
        "nucleus threshold",
        _opt(
            float,
            PAPER.top_p,
            Check("in (0, 1]; 1 disables nucleus filtering", lambda v: 0 < v <= 1),
        ),
        baseline="sampling.top_p",
        grouped=True,
    ),
    Setting(
        "top_k",
        "top-k filter of the sampling distributions",
        _opt(int | None, PAPER.top_k, at_least(0, "(0: off)")),
        baseline="sampling.top_k",
        grouped=True,
    ),
    Setting("seed", "seed of the run", _opt(int, PAPER.seed, at_least(0)), baseline="seed"),
    # repeats=1 rows keep the hash they had before the setting existed
    Setting(
        "repeats",
        "decodes per prompt, each with its own seeds (both arms); empty in rows before it existed",
        _opt(int, 1, at_least(1, why="1 decodes each prompt once")),
        unhashed=1,
    ),
    Setting(
        "max_new_tokens",
        "generation cap per prompt",
        _opt(int, PAPER.max_new_tokens, at_least(1)),
        baseline="max_new_tokens",
        grouped=True,
    ),
    Setting(
        "baseline",
        "how the verifier-only baseline is decoded: interleave (prompt by prompt, same run) | "
        "cached (decoded once, reused) | none",
        _opt(str, "interleave", one_of(BASELINE_MODES)),
        column="baseline_mode",
        verifier_value="none",
    ),
    # batch=1 rows keep their hashes and baseline keys
    Setting(
        "batch",
        "requests decoded at once, continuous batching (both arms); 1 = one at a time",
        _opt(int, 1, at_least(1)),
        unhashed=1,
        baseline="sampling.batch",
        grouped=True,
    ),
    Setting(
        "delta",
        "shortcut for sampler.delta, set while the config is composed (rules without a "
        "divergence budget ignore it)",
        _opt(float | None, None),
        hashed=False,
        column=None,
    ),
    Setting(
        "limit",
        "first `limit` prompts of the task; null = all",
        _opt(int | None, None, at_least(1, "for all prompts")),
        column=None,
    ),
    Setting(
        "device",
        "auto (cuda when available, else cpu) | cpu | mps | cuda | cuda:N",
        _opt(
            str,
            "auto",
            Check("auto, cpu, mps, cuda or cuda:N", lambda v: bool(DEVICE_PATTERN.match(v))),
        ),
        column=None,
    ),
    # the HF engine's random draws: sampled rows from before counter draws keep their hashes
    Setting(
        "draws",
        "how the HF engine draws its random numbers (counter: keyed on seed and position)",
        source="draws",
        column=None,
        unhashed=None,
        baseline="sampling.draws",
    ),
    # the forward path changes timings
    Setting("engine", "the HF engine's forward path", source="hashed_engine", column=None),
    Setting(
        "threads",
        "torch CPU threads (null = all cores); 1 keeps CPU timings stable on a shared machine",
        _opt(int | None, None, at_least(1, "")),
        column=None,
    ),
    # how an unfinished <think> block is scored; "paper" rows keep their hashes
    Setting(
        "think_filter",
        "an unfinished <think> block: paper scores its text, tag removed (the reference code); "
        "strict never scores unfinished reasoning",
        _opt(str, "paper", one_of(THINK_FILTERS)),
        column=None,
        unhashed="paper",
    ),
    # the committed drafter's weights and logit scale (hub drafters are pinned by id/revision)
    Setting(
        "drafter_fingerprint",
        "the committed drafter's weights and logit scale",
        source="drafter_fingerprint",
        column=None,
        unhashed=None,
    ),
    Setting(
        "baseline_dir",
        "folder of the reusable verifier-only baselines; null = <results_dir>/baselines",
        _opt(str | None, None),
        hashed=False,
        column=None,
    ),
    Setting(
        "drift_threshold",
        "a row is marked (drift_marked) when an arm's step rate moves by more than this "
        "fraction between the first and second half of its waves",
        _opt(float, 0.1, Check("> 0", lambda v: v > 0)),
        hashed=False,
    ),
    Setting(
        "baseline_max_age_h",
        "baseline=cached: a cached baseline decoded more hours ago than this is refused",
        _opt(float, 24.0, Check("> 0", lambda v: v > 0)),
        hashed=False,
        column=None,
    ),
    Setting(
        "force",
        "rerun even when a finished row with this config hash exists",
        _opt(bool, False),
        hashed=False,
        column=None,
    ),
    Setting(
        "data_dir",
        "offline data folder laid out like shared/data (default: env CACTUS_BENCH_DATA)",
        _opt(str | None, None),
        hashed=False,
        column=None,
    ),
    Setting(
        "results_dir",
        "folder of the results CSV",
        _opt(str, "results", Check("a folder for the results CSV", bool)),
        hashed=False,
        column=None,
    ),
)

OPTIONS: tuple[Setting, ...] = tuple(s for s in RUN_SETTINGS if s.option is not None)
COLUMN_SETTINGS: tuple[Setting, ...] = tuple(s for s in RUN_SETTINGS if s.csv_column is not None)

# The report's grouping: the table's grouped columns and every rule parameter's own column.
GROUPED_COLUMNS: frozenset[str] = frozenset(
    {s.csv_column for s in RUN_SETTINGS if s.grouped and s.csv_column} | set(PARAM_COLUMNS)
)


def check_options(conf: Any) -> str | None:
    """The one-line complaint about the first option of `conf` outside its range, or None."""
    for setting in RUN_SETTINGS:
        check = setting.option.check if setting.option else None
        value = getattr(conf, setting.key) if check else None
        if check is not None and not check.ok(value):
            return f"{setting.key} must be {check.rule} (got {value!r})"
    return None


def setting_value(setting: Setting, identity: Any) -> Any:
    """The run's value of `setting`; a dataclass node (model, engine) as a plain dict, a dict
    as a copy."""
    if setting.verifier_value is not UNSET and not identity.speculative:
        return setting.verifier_value
    value = operator.attrgetter(setting.path)(identity)
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return dict(value) if isinstance(value, dict) else value


def hashed_values(identity: Any) -> dict[str, Any]:
    """{name: value} of every hashed setting, less those at their `unhashed` value."""
    fields = {}
    for setting in RUN_SETTINGS:
        if setting.hashed:
            value = setting_value(setting, identity)
            if setting.unhashed is UNSET or value != setting.unhashed:
                fields[setting.name] = value
    return fields


def column_values(identity: Any) -> dict[str, Any]:
    """{column: value} of every setting with a CSV column."""
    return {
        s.csv_column: setting_value(s, identity) for s in RUN_SETTINGS if s.csv_column is not None
    }


def baseline_values(identity: Any) -> dict[str, Any]:
    """The baseline-cache key's settings, "sampling.<x>" nested under "sampling"."""
    fields: dict[str, Any] = {"sampling": {}}
    for setting in RUN_SETTINGS:
        if setting.baseline is None:
            continue
        value = setting_value(setting, identity)
        if setting.unhashed is not UNSET and value == setting.unhashed:
            continue
        head, _, leaf = setting.baseline.rpartition(".")
        (fields[head] if head else fields)[leaf] = value
    return fields
