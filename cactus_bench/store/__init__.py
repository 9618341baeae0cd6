"""Results: the CSV schema, the locked append-only store, summaries of per-request records.

```python
from cactus_bench.store import COLUMNS, ResultStore, summarise, run_metadata, config_hash
store = ResultStore("results/runs.csv")
h = config_hash(result_relevant_config)
if not store.has_finished(h):
    row = {"run_id": ..., "config_hash": h, **run_metadata("cpu"), **summarise(recs, base), ...}
    store.append(row); store.append_records(run_id, recs)
```
`WandbMirror` lives in `cactus_bench.store.wandb_mirror` (imports wandb lazily).
"""

from cactus_bench.store.baseline_cache import BaselineCache, baseline_key, prompts_hash
from cactus_bench.store.csv_store import ResultStore
from cactus_bench.store.metadata import config_hash, device_name, git_state, run_metadata
from cactus_bench.store.schema import (
    COLUMNS,
    CONFIG_COLUMNS,
    MEASUREMENT_COLUMNS,
    REQUIRED_COLUMNS,
    SCHEMA,
    coerce_frame,
    row_to_cells,
)
from cactus_bench.store.summarise import summarise

__all__ = [
    "COLUMNS",
    "CONFIG_COLUMNS",
    "SCHEMA",
    "REQUIRED_COLUMNS",
    "MEASUREMENT_COLUMNS",
    "row_to_cells",
    "coerce_frame",
    "summarise",
    "run_metadata",
    "config_hash",
    "device_name",
    "git_state",
    "ResultStore",
    "BaselineCache",
    "baseline_key",
    "prompts_hash",
]
