"""An additive slack on speculative sampling's ratio test (vLLM pull request #35355, open):

    a(v) = min(1, q(v) / p(v) + slack),        r = (q - p)+ (vLLM's recovery, unchanged)

slack = 0 is SpS. The emitted law (docs/rules.md, F8): pi = min(p, q + slack p) where q < p and
p + c (q - p) where q >= p, c = sum (p - q - slack p)+ / TV(p, q). r > 0 only where q > p, where
a = 1, so the rule is GenSpecSample against pi (the target family).
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


class Additive(Builder):
    info = RuleInfo(
        "additive",
        "additive acceptance threshold: accept with min(1, q / p + slack), residual (q - p)+",
        (Param("slack", float, "added to the ratio q(n) / p(n) (0 = SpS)", low=0.0),),
    )

    def __init__(self, slack: float = 0.1):
        self._store(slack=slack)

    def plan(self, p, q, p_bar, q_bar):
        import torch  # lazy: keeps torch out of the catalogue

        safe = torch.where(p > 0, p, torch.ones_like(p))
        ratio = torch.where(p > 0, q / safe + self.slack, torch.ones_like(p))
        return ratio.clamp(max=1.0), (q - p).clamp(min=0)


BUILDERS = (Additive,)
