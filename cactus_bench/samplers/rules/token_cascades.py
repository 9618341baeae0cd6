"""Speculative cascades with a per-token deferral (Narasimhan et al., ICLR 2025; TokenV1-V3).

A token v is deferred (r(v) = 1) by a test on the temperature-1 laws p_bar, q_bar; the target is
Eq. 11 of the paper (the official colab's code):

    pi(v) = p(v) (1 - r(v)) + eta q(v),     eta = sum_u r(u) p(u)

verified with the kernel's GenSpecSample (so a kept token is always accepted, a deferred one
with min(1, eta q / p)). docs/rules.md, F3:

    tokenv1   r(v) = 1 iff p_bar(v) < max q_bar - alpha          colab "equation 13", [-1, 1]
    tokenv2   r(v) = 1 iff q_bar(v) < max q_bar - alpha          colab "equation 14", [-1, 1]
    tokenv3   r(v) = 1 iff q_bar(v) < (1 - alpha) max q_bar      colab "equation 15", [0, 1]

TokenV3 keeps a min-p set of the verifier; at alpha = 0 it still keeps argmax q_bar, so it is
SpS only for alpha < 0 (outside the colab's range).
"""

from __future__ import annotations

from cactus_bench.samplers.params import TEST_LAW, Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


class _TokenCascade(Builder):
    def __init__(self, alpha: float = 0.5, test_law: str = "unscaled"):
        self._store(alpha=alpha, test_law=test_law)

    def deferred(self, p_bar, q_bar):  # -> [..., V] bool
        raise NotImplementedError

    def plan(self, p, q, p_bar, q_bar):
        from cactus_bench.samplers.kernel import against_target  # lazy: loads torch

        deferred = self.deferred(p_bar, q_bar).to(p.dtype)
        eta = (deferred * p).sum(-1, keepdim=True)
        return against_target(p, p * (1 - deferred) + eta * q)


def _info(name: str, test: str, low: float) -> RuleInfo:
    doc = f"deferral margin ({low:g} ~ SpS, 1 = drafter only)"
    return RuleInfo(
        name,
        f"token-level speculative cascade: defer v iff {test}; pi = p (1 - r) + eta q",
        (Param("alpha", float, doc, low=low, high=1.0), TEST_LAW),
    )


class TokenV1(_TokenCascade):
    info = _info("tokenv1", "p_bar(v) < max q_bar - alpha", -1.0)

    def deferred(self, p_bar, q_bar):
        return p_bar < q_bar.amax(-1, keepdim=True) - self.alpha


class TokenV2(_TokenCascade):
    info = _info("tokenv2", "q_bar(v) < max q_bar - alpha", -1.0)

    def deferred(self, p_bar, q_bar):
        return q_bar < q_bar.amax(-1, keepdim=True) - self.alpha


class TokenV3(_TokenCascade):
    info = _info("tokenv3", "q_bar(v) < (1 - alpha) max q_bar", 0.0)

    def deferred(self, p_bar, q_bar):
        return q_bar < (1 - self.alpha) * q_bar.amax(-1, keepdim=True)


BUILDERS = (TokenV1, TokenV2, TokenV3)
