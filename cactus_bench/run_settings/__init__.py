"""The run's settings, declared once: one line of `RUN_SETTINGS` per setting (table.py joins its
two parts: what_ran.py, what a run is of; how_it_ran.py, its options and engine).

A `Setting` names one value of a run and everything about it:
- `option`: when it is a top-level key of the run config (`m=2` on the command line), its type,
  default and the check its value passes. `run/conf.py` builds `RunConf`'s fields from these,
  and `run/checks.py` runs the checks before anything loads;
- `doc`: one line, used for the CSV column's doc (store/columns.py), the settings comment in
  configs/config.yaml and the settings table in docs/configuration.md (both generated:
  `make docs`; tests/test_settings_doc.py fails when either is stale);
- `source`: where the run's value is read on its `RunIdentity` (default `conf.<key>`);
- `hashed`: into the config hash under `name` (resume keys on it). `unhashed` is a value left
  out of the hash (and the baseline key), so rows written before the setting existed keep
  their hashes;
- `column`: the results row's column (default `name`; None = no column), of kind `kind`
  (default: from the option's type). The schema's configuration columns are these, in order;
- `baseline`: into the key of the reusable verifier-only baseline ("sampling.top_p" nests);
- `grouped`: the report gives each of its values its own cell (seeds are averaged instead);
- `verifier_value`: what a verifier-only run records instead (it drafts nothing).

`run/identity.py` (hash, row, W&B, baseline key), `store/columns.py` (configuration columns),
`report/load.py` (grouping), `run/conf.py` (fields) and `run/checks.py` (ranges) derive from this
table (values.py reads it for the hash, row, baseline key and checks). A new run setting is one
line of what_ran.py or how_it_ran.py. Torch-free and import-light: the store layer and the
config checks read it.
"""

from __future__ import annotations

from cactus_bench.run_settings.how_it_ran import ACCEPTANCE_MODES, BASELINE_MODES
from cactus_bench.run_settings.setting import UNSET, Check, Option, Setting, at_least, one_of
from cactus_bench.run_settings.table import (
    COLUMN_SETTINGS,
    GROUPED_COLUMNS,
    OPTIONS,
    PARAM_COLUMNS,
    RUN_SETTINGS,
)
from cactus_bench.run_settings.values import (
    baseline_values,
    check_options,
    column_values,
    hashed_values,
    setting_value,
)
from cactus_bench.samplers.catalogue import PARAM_COLUMN_SPECS  # the schema's parameter columns

__all__ = [
    "ACCEPTANCE_MODES",
    "BASELINE_MODES",
    "COLUMN_SETTINGS",
    "GROUPED_COLUMNS",
    "OPTIONS",
    "PARAM_COLUMN_SPECS",
    "PARAM_COLUMNS",
    "RUN_SETTINGS",
    "UNSET",
    "Check",
    "Option",
    "Setting",
    "at_least",
    "baseline_values",
    "check_options",
    "column_values",
    "hashed_values",
    "one_of",
    "setting_value",
]
