"""The base of every builder in this package (torch-free): parameters checked, stored, listed."""

from __future__ import annotations

from typing import ClassVar

from cactus_bench.samplers.declared import Declared


class Builder(Declared):
    """Subclasses set `info`, call `self._store(name=value, ...)` in `__init__` and write `plan`."""

    deterministic_accept: ClassVar[bool] = False  # a(v) in {0, 1}: the test decides, not a draw

    @property
    def reads_unscaled(self) -> bool:
        return getattr(self, "test_law", "processed") == "unscaled"

    def plan(self, p, q, p_bar, q_bar):  # [..., V] float64 rows -> (a, r), each [..., V]
        raise NotImplementedError
