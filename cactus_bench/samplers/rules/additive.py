"""vLLM's additive acceptance threshold (pull request #35355, open, "add acceptance_threshold
argument"): a threshold t added to speculative sampling's ratio test,

    a(v) = min(1, q(v) / p(v) + t),        r = (q - p)+ (vLLM's recovery, unchanged)

The pull request's description (read) names the argument and its ends: "A value of 0 gives
standard behavior, while higher values make acceptance more likely"; its diff was not in the
stored corpus, so the additive form on the ratio is the field summary's (docs/rules.md, F8).
The emitted law: pi = min(p, q + t p) where q < p and p + c (q - p) where q >= p, with
c = sum (p - q - t p)+ / TV(p, q). r > 0 only where q > p, where a = 1: the target family.
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


class Additive(Builder):
    info = RuleInfo(
        "additive",
        "vLLM's acceptance_threshold t: accept with min(1, q / p + t), residual (q - p)+",
        (Param("acceptance_threshold", float, "t added to q(n) / p(n) (0 = SpS)", low=0.0),),
    )

    def __init__(self, acceptance_threshold: float = 0.1):
        self._store(acceptance_threshold=acceptance_threshold)

    def plan(self, p, q, p_bar, q_bar):
        import torch  # lazy: keeps torch out of the catalogue

        safe = torch.where(p > 0, p, torch.ones_like(p))
        ratio = torch.where(p > 0, q / safe + self.acceptance_threshold, torch.ones_like(p))
        return ratio.clamp(max=1.0), (q - p).clamp(min=0)


BUILDERS = (Additive,)
