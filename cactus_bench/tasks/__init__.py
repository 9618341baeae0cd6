"""Tasks through lm-evaluation-harness: GSM8K, IFEval, GPQA (diamond, generative CoT) and demo.

```python
from cactus_bench.tasks import evaluate_task, TaskResult, TASK_NAMES, TASK_SPECS
res = evaluate_task(task="gsm8k", decoder=dec, baseline=base_or_None, tokenizer=tok,
                    chat_template_kwargs={}, data_dir=None, limit=None, seed=1234,
                    gen_kwargs=None, max_gen_toks=4096, repeats=1)
res.metrics; res.score_name; res.score; res.n_samples; res.records; res.baseline_records
TASK_SPECS["gpqa"].score_name   # headline metric key, "exact_match,strict-match"
```
`CactusBenchLM` is the lm-eval model (registered as "cactus_bench"). TASK_NAMES and TASK_SPECS
import without lm-eval or torch; the rest is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from cactus_bench.tasks.specs import PAPER_GEN_KWARGS, TASK_NAMES, TASK_SPECS, TaskSpec

if TYPE_CHECKING:
    from cactus_bench.tasks.data import TaskDataError
    from cactus_bench.tasks.evaluate import TaskResult, evaluate_task, lm_eval_seeds
    from cactus_bench.tasks.lm import CactusBenchLM
    from cactus_bench.tasks.paper_settings import strip_thinking

_LAZY = {
    "evaluate_task": "cactus_bench.tasks.evaluate",
    "TaskResult": "cactus_bench.tasks.evaluate",
    "lm_eval_seeds": "cactus_bench.tasks.evaluate",
    "CactusBenchLM": "cactus_bench.tasks.lm",
    "TaskDataError": "cactus_bench.tasks.data",
    "strip_thinking": "cactus_bench.tasks.paper_settings",
}

__all__ = [
    "TASK_NAMES",
    "TASK_SPECS",
    "TaskSpec",
    "PAPER_GEN_KWARGS",
    "evaluate_task",
    "TaskResult",
    "lm_eval_seeds",
    "CactusBenchLM",
    "TaskDataError",
    "strip_thinking",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cactus_bench.tasks' has no attribute {name!r}")
