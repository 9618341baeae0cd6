"""The rules that verify against a per-position target (docs/rules.md, Formulas): one builder
per rule.

Each module here declares `BUILDERS`, a tuple of builder classes. A builder holds its catalogue
entry (`info`, a `params.RuleInfo`), takes exactly those parameters in `__init__`, returns them
from `params()`, says whether it reads the temperature-1 laws (`reads_unscaled`) and builds,
from normalised float64 rows [..., V], the per-token acceptance and the residual:

    plan(p, q, p_bar, q_bar) -> (a [..., V] in [0, 1], r [..., V] >= 0)

which `samplers.kernel.PlanRule` runs (verify, exact acceptance and law). Modules are collected
in file-name order, so adding a rule is a new file here plus its configs/sampler/<name>.yaml.
The modules import torch only inside `plan`: the catalogue reads `info` without loading torch.
"""

from __future__ import annotations

import importlib
import pkgutil


def _collect() -> tuple[type, ...]:
    builders: list[type] = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith("_"):  # shared helpers, not rules
            continue
        builders += importlib.import_module(f"{__name__}.{module.name}").BUILDERS
    return tuple(builders)


BUILDERS: tuple[type, ...] = _collect()
