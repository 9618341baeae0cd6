"""The near-top rules of lossy-token-eff (chiatzenw-cur/lossy-token-eff, 2026): a draft near the
verifier's top is accepted outright, every other draft takes speculative sampling's test.

    topband           kept(v) iff q(v) >= (1 - alpha) max q          (`spec-casc-tok-lt`)
    topband_cascade   kept(v) iff not OPT's deferral at the position (max p < max q - alpha TV)
                      and q(v) >= (1 - beta) max q                   (`spec-casc-opt-head`)

    a(v) = 1 where kept, min(1, q(v) / p(v)) elsewhere;   r = (q - p)+

The source computes a defer mask (its patches' test files: defer=True is the strict test
u <= q/p, defer=False accepts whatever u is) and leaves the kernel's recovery as vLLM's,
norm((q - p)+). Both read the sampling laws p, q the rejection sampler sees. The emitted law
(docs/rules.md, F7), with c = (1 - beta) / TV(p, q) and 1 - beta = sum over non-kept v of
(p - q)+:

    pi(v) = p(v) + c (q(v) - p(v))+  where kept,    min(p, q)(v) + c (q(v) - p(v))+  elsewhere.

r > 0 only where q > p, where a = 1, so the kernel is GenSpecSample against pi (F0): the rules
are in the target family. topband keeps argmax q even at alpha = 0 (the source's own note: its
strict point is alpha = -inf), so alpha = 0 is not SpS.
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


def kept_plan(p, q, kept):
    """(a, r): a = 1 on `kept` [..., V] bool, SpS's min(1, q / p) elsewhere; r = (q - p)+."""
    import torch  # lazy: keeps torch out of the catalogue

    safe = torch.where(p > 0, p, torch.ones_like(p))
    sps = torch.where(p > 0, q / safe, torch.ones_like(p)).clamp(max=1.0)
    return torch.where(kept, torch.ones_like(p), sps), (q - p).clamp(min=0)


class TopBand(Builder):
    info = RuleInfo(
        "topband",
        "near-top rule: accept outright iff q(n) >= (1 - alpha) max q, else SpS's test",
        (Param("alpha", float, "band width (0: argmax q only; 1: every token)", low=0, high=1),),
    )

    def __init__(self, alpha: float = 0.2):
        self._store(alpha=alpha)

    def plan(self, p, q, p_bar, q_bar):
        return kept_plan(p, q, q >= (1 - self.alpha) * q.amax(-1, keepdim=True))


class TopBandCascade(Builder):
    info = RuleInfo(
        "topband_cascade",
        "OPT cascade gated by the band: keep n iff no OPT deferral and q(n) >= (1 - beta) max q",
        (
            Param("alpha", float, "OPT's margin: defer iff max p < max q - alpha TV(p, q)"),
            Param("beta", float, "head band (1: plain OPT; 0: argmax q only)", low=0, high=1),
        ),
    )

    def __init__(self, alpha: float = 0.5, beta: float = 0.8):
        self._store(alpha=alpha, beta=beta)

    def plan(self, p, q, p_bar, q_bar):
        top = q.amax(-1, keepdim=True)
        tv = (q - p).clamp(min=0).sum(-1, keepdim=True)
        deferred = p.amax(-1, keepdim=True) < top - self.alpha * tv  # [..., 1]
        return kept_plan(p, q, ~deferred & (q >= (1 - self.beta) * top))


BUILDERS = (TopBand, TopBandCascade)
