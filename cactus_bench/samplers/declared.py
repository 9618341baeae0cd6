"""Rules declare their parameters once: a catalogue entry (`RuleInfo`) on the rule's class.

`Declared` is the base both rule families share: the builders of `samplers/rules/` and the rules
whose classes implement the chain's hooks themselves (`target_rules.py`: sps, cactus,
cactus_exact, interp; `heuristic_rules.py`: tas, topk, greedy). A class sets `info`, takes
exactly those parameters in `__init__` (with its defaults) and stores them with `_store`;
`params()` and `name` follow from `info`. The catalogue collects the entries (torch-free), the
registry the classes; a test checks each `__init__` against its entry.

The hook rules' modules load torch, so their entries are declared here, torch-free, where the
catalogue reads them without loading torch (a builder's module is torch-free: its entry sits in
the class body).
"""

from __future__ import annotations

from typing import Any, ClassVar

from cactus_bench.samplers.params import DELTA, DIVERGENCE_NAMES, Param, RuleInfo


class Declared:
    """Subclasses set `info` and call `self._store(name=value, ...)` in `__init__`."""

    info: ClassVar[RuleInfo]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "info" in vars(cls):
            cls.name = cls.info.name  # the rule's name (AcceptanceRule.name, rows' sampler)

    def _store(self, **values: Any) -> None:
        """Each parameter coerced and range-checked by the catalogue entry, then kept."""
        for name, value in values.items():
            setattr(self, name, self.info.param(name).coerce(self.info.name, value))

    def params(self) -> dict[str, Any]:
        """{parameter: value} in the entry's order: what identifies the rule's run."""
        return {param.name: getattr(self, param.name) for param in self.info.params}


# ---- the hook rules' entries, in the catalogue's order ------------------------------------------
SPS = RuleInfo("sps", "standard speculative sampling: lossless, target h = q")
CACTUS = RuleInfo("cactus", "Cactus, the paper's Taylor step (Corollary 5)", (DELTA,))
CACTUS_EXACT = RuleInfo(
    "cactus_exact",
    "Cactus with the exact root of Theorem 2 for an f-divergence",
    (DELTA, Param("divergence", str, "f-divergence", choices=DIVERGENCE_NAMES)),
)
TAS = RuleInfo(
    "tas",
    "typical acceptance (Medusa; vLLM V0): q(n) > min(threshold, alpha exp(-H(q)))",
    (
        Param("threshold", float, "TAS epsilon", low=0.0, low_open=True, high=1.0),
        Param("alpha", float, "TAS alpha", low=0.0, low_open=True),
    ),
)
INTERP = RuleInfo(
    "interp",
    "verify against alpha p + (1 - alpha) q",
    (Param("alpha", float, "interpolation weight on the drafter", low=0.0, high=1.0),),
)
TOPK = RuleInfo(
    "topk",
    "accept iff q(n) is within q's top k",
    (Param("k", int, "top-k acceptance", low=1, column="top_k_accept"),),
)
GREEDY = RuleInfo("greedy", "accept iff n = argmax q (temperature 0)")
HOOK_RULES: tuple[RuleInfo, ...] = (SPS, CACTUS, CACTUS_EXACT, TAS, INTERP, TOPK, GREEDY)
