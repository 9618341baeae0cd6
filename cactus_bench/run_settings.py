"""The run's settings, declared once: what enters the config hash, the results row, the
baseline-cache key and the report's grouping.

Each `Setting` reads one value of a run from its `RunIdentity` (an attribute path, e.g.
`conf.temperature`) and says where that value goes:
- `hashed`: into the config hash under `name` (resume keys on it). `unhashed` is a value left
  out of the hash (and the baseline key), so rows written before the setting existed keep
  their hashes;
- `column`: into the results row (a column of results/schema.py, where its kind and doc live);
- `baseline`: into the key of the reusable verifier-only baseline ("sampling.top_p" nests);
- `grouped`: the report gives each of its values its own cell (seeds are averaged instead);
- `verifier_value`: what a verifier-only run records instead (it drafts nothing).

`run/identity.py` (hash, row, W&B, baseline key), `results/schema.py` (CONFIG_COLUMNS) and
`report/load.py` (grouping) derive their lists from this table; tests/test_run_settings.py checks
that they agree. A new run setting is one line here (plus its Column in results/schema.py when
it gets a column). Torch-free and import-light: the results layer reads it.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from typing import Any

from cactus_bench.samplers.catalogue import PARAM_COLUMNS


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # "no such value": a setting without an `unhashed` or `verifier_value`


@dataclass(frozen=True)
class Setting:
    name: str  # key in the config hash; also the CSV column unless `column` says otherwise
    source: str  # attribute path on RunIdentity that holds the run's value
    hashed: bool = True
    column: str | None = ""  # "" = `name`; None = no column of its own
    unhashed: Any = UNSET  # a value left out of the hash (older rows keep their hashes)
    baseline: str | None = None  # place in the baseline-cache key, "sampling.<x>" nests
    grouped: bool = False  # the report gives each value its own cell
    verifier_value: Any = UNSET  # what a verifier-only run records instead

    @property
    def csv_column(self) -> str | None:
        return self.name if self.column == "" else self.column


RUN_SETTINGS: tuple[Setting, ...] = (
    # the pair: the whole model node (ids, revisions, dtype, context, chat kwargs) is hashed
    Setting("model", "conf.model", column=None),
    Setting("model_pair", "conf.model.name", hashed=False, grouped=True),
    Setting("drafter_id", "conf.model.drafter", hashed=False, verifier_value=None),
    Setting("verifier_id", "conf.model.verifier", hashed=False, baseline="verifier_id"),
    Setting(
        "verifier_revision",
        "conf.model.verifier_revision",
        hashed=False,
        column=None,
        baseline="sampling.verifier_revision",
    ),
    # the commit an unpinned revision resolved to: after the hub moves main, not reused
    Setting(
        "verifier_commit",
        "verifier_commit",
        hashed=False,
        column=None,
        unhashed=None,
        baseline="sampling.verifier_commit",
    ),
    # the dtype the models ran in, `auto` resolved for this device
    Setting("dtype", "dtype", hashed=False, baseline="sampling.dtype"),
    # dtype=auto is bf16 on one CPU and fp32 on another: hashed as resolved (a set dtype is
    # in `model` already)
    Setting("resolved_dtype", "auto_dtype", column=None, unhashed=None),
    Setting("task", "conf.task.name", baseline="task", grouped=True),
    Setting("limit", "conf.limit", column=None),
    Setting("seed", "conf.seed", baseline="seed"),
    # repeats=1 rows keep the hash they had before the setting existed
    Setting("repeats", "conf.repeats", unhashed=1),
    Setting("sampler", "sampler", grouped=True),
    # the rule's params(): {} for the verifier in the hash, an empty cell in the row
    Setting("sampler_params", "sampler_params", column=None),
    Setting("sampler_params", "sampler_params", hashed=False, grouped=True, verifier_value=None),
    Setting("m", "conf.m", grouped=True, verifier_value=None),
    Setting("temperature", "conf.temperature", baseline="sampling.temperature", grouped=True),
    Setting("top_p", "conf.top_p", baseline="sampling.top_p", grouped=True),
    Setting("top_k", "conf.top_k", baseline="sampling.top_k", grouped=True),
    Setting("max_new_tokens", "conf.max_new_tokens", baseline="max_new_tokens", grouped=True),
    Setting("device", "conf.device", column=None),
    # hf: the bare name (older rows keep their hashes); vllm: its options change timings
    Setting("backend", "hashed_backend", column=None),
    Setting("backend", "conf.backend.name", hashed=False),
    Setting("engine", "conf.engine", column=None),  # the forward path changes timings
    Setting("threads", "conf.threads", column=None),
    Setting("baseline", "conf.baseline", column="baseline_mode", verifier_value="none"),
    # how an unfinished <think> block is scored; "paper" rows keep their hashes
    Setting("think_filter", "conf.think_filter", column=None, unhashed="paper"),
    # the committed drafter's weights and logit scale (hub drafters are pinned by id/revision)
    Setting("drafter_fingerprint", "drafter_fingerprint", column=None, unhashed=None),
    Setting("experiment", "conf.experiment_name", hashed=False),
)

# The report's grouping: the table's grouped columns and every rule parameter's own column.
GROUPED_COLUMNS: frozenset[str] = frozenset(
    {s.csv_column for s in RUN_SETTINGS if s.grouped and s.csv_column} | set(PARAM_COLUMNS)
)


def setting_value(setting: Setting, identity: Any) -> Any:
    """The run's value of `setting`; a dataclass node (model, engine) as a plain dict, a dict
    as a copy."""
    if setting.verifier_value is not UNSET and not identity.speculative:
        return setting.verifier_value
    value = operator.attrgetter(setting.source)(identity)
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
