"""The base of every builder in this package (torch-free): parameters checked, stored, listed."""

from __future__ import annotations

from typing import Any, ClassVar

from cactus_bench.samplers.params import RuleInfo


class Builder:
    """Subclasses set `info`, call `self._store(name=value, ...)` in `__init__` and write `plan`."""

    info: ClassVar[RuleInfo]
    deterministic_accept: ClassVar[bool] = False  # a(v) in {0, 1}: the test decides, not a draw

    def _store(self, **values: Any) -> None:
        """Each parameter coerced and range-checked by the catalogue entry, then kept."""
        for name, value in values.items():
            setattr(self, name, self.info.param(name).coerce(self.info.name, value))

    def params(self) -> dict[str, Any]:
        return {param.name: getattr(self, param.name) for param in self.info.params}

    @property
    def reads_unscaled(self) -> bool:
        return getattr(self, "test_law", "processed") == "unscaled"

    def plan(self, p, q, p_bar, q_bar):  # [..., V] float64 rows -> (a, r), each [..., V]
        raise NotImplementedError
