"""What a run derives from the settings table: the range checks of its options, and the values
of its hash, its results row and its baseline key.

Each function reads `table.RUN_SETTINGS` when it is called, not when this module is imported, so
a setting added to the table (or by a test) reaches every one of them.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from cactus_bench.run_settings import table
from cactus_bench.run_settings.setting import UNSET, Setting


def check_options(conf: Any) -> str | None:
    """The one-line complaint about the first option of `conf` outside its range, or None."""
    for setting in table.RUN_SETTINGS:
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
    for setting in table.RUN_SETTINGS:
        if setting.hashed:
            value = setting_value(setting, identity)
            if setting.unhashed is UNSET or value != setting.unhashed:
                fields[setting.name] = value
    return fields


def column_values(identity: Any) -> dict[str, Any]:
    """{column: value} of every setting with a CSV column."""
    return {
        s.csv_column: setting_value(s, identity)
        for s in table.RUN_SETTINGS
        if s.csv_column is not None
    }


def baseline_values(identity: Any) -> dict[str, Any]:
    """The baseline-cache key's settings, "sampling.<x>" nested under "sampling"."""
    fields: dict[str, Any] = {"sampling": {}}
    for setting in table.RUN_SETTINGS:
        if setting.baseline is None:
            continue
        value = setting_value(setting, identity)
        if setting.unhashed is not UNSET and value == setting.unhashed:
            continue
        head, _, leaf = setting.baseline.rpartition(".")
        (fields[head] if head else fields)[leaf] = value
    return fields
