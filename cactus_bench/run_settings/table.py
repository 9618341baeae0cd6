"""The table of the run's settings, `RUN_SETTINGS`, and the subsets read off it.

One line per setting (what a line holds: setting.py), in two parts by meaning: what a run is of
(what_ran.py: pair, backend, dtype, task, rule) and how it ran (how_it_ran.py: its options and
its engine). The order is the results row's column order and the docs' order. The package
docstring says who reads the table; values.py derives a run's checks, hash, row and baseline key.
"""

from __future__ import annotations

from cactus_bench.run_settings.how_it_ran import HOW_IT_RAN
from cactus_bench.run_settings.setting import Setting
from cactus_bench.run_settings.what_ran import WHAT_RAN
from cactus_bench.samplers.catalogue import PARAM_COLUMNS

RUN_SETTINGS: tuple[Setting, ...] = (*WHAT_RAN, *HOW_IT_RAN)

OPTIONS: tuple[Setting, ...] = tuple(s for s in RUN_SETTINGS if s.option is not None)
COLUMN_SETTINGS: tuple[Setting, ...] = tuple(s for s in RUN_SETTINGS if s.csv_column is not None)

# The report's grouping: the table's grouped columns and every rule parameter's own column.
GROUPED_COLUMNS: frozenset[str] = frozenset(
    {s.csv_column for s in RUN_SETTINGS if s.grouped and s.csv_column} | set(PARAM_COLUMNS)
)
