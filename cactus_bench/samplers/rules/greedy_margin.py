"""The greedy margin rule (AdaptiveSpec, arXiv 2609.02897): a draft that is not the verifier's
argmax is accepted when its verifier probability is within a factor K of the top,

    a(v) = 1[q(v) >= K max q],        r = one-hot(argmax q)

and a rejected draft is replaced by the verifier's argmax (the greedy fallback; docs/rules.md,
F6 and F9). The law is p 1[S] + (1 - p(S)) 1[argmax q] with S = {q >= K max q}. Here the draft
is sampled (n ~ p) as for every rule, and the test applies at every drafted position. It is an
accept-set rule, outside the target family: the guards refuse it.
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


class GreedyMargin(Builder):
    info = RuleInfo(
        "greedy_margin",
        "greedy margin: accept iff q(n) >= K max q, else emit argmax q",
        (
            Param(
                "margin",
                float,
                "K: the draft's share of max q (1 = argmax only)",
                low=0.0,
                low_open=True,
                high=1.0,
            ),
        ),
    )
    deterministic_accept = True

    def __init__(self, margin: float = 0.5):
        self._store(margin=margin)

    def plan(self, p, q, p_bar, q_bar):
        import torch  # lazy: keeps torch out of the catalogue

        accept = (q >= self.margin * q.amax(-1, keepdim=True)).to(p.dtype)
        argmax = torch.zeros_like(q).scatter_(-1, q.argmax(-1, keepdim=True), 1.0)
        return accept, argmax


BUILDERS = (GreedyMargin,)
