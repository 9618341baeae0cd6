"""Leviathan et al. (2023), Appendix A.5 "Lenience": compare q(x) / l with p(x).

    a(x) = min(1, q(x) / (l p(x))),        r = (q - p)+ (Algorithm 1's residual, kept in A.5)

l = 1 is SpS; smaller l accepts more. The emitted law (docs/rules.md, F2; checked in the tests):
pi(x) = min(p(x), q(x) / l) where q < p, else p(x) + c (q(x) - p(x)), c = sum (p - q/l)+ / TV.
It is mentored decoding with beta fixed to 1 (the "mentored, beta = 1" of Xia et al. 2026) and
the google-research SpecCascades colab's `speed` method with lenience = 1 - l.
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


class Lenience(Builder):
    info = RuleInfo(
        "lenience",
        "Leviathan et al. A.5: accept with min(1, q / (l p)), residual (q - p)+",
        (
            Param(
                "l",
                float,
                "lenience l (1 = SpS)",
                low=0.0,
                low_open=True,
                high=1.0,
                column="lenience_l",
            ),
        ),
    )

    def __init__(self, l: float = 0.5):  # noqa: E741 (the source's name)
        self._store(l=l)

    def plan(self, p, q, p_bar, q_bar):
        import torch  # lazy: keeps torch out of the catalogue

        safe = torch.where(p > 0, p, torch.ones_like(p))
        accept = torch.where(p > 0, q / (self.l * safe), torch.ones_like(p)).clamp(max=1.0)
        return accept, (q - p).clamp(min=0)


BUILDERS = (Lenience,)
