"""Speculative cascades with a sequence-level deferral (Narasimhan et al., ICLR 2025).

A deferral decision per position picks the target: pi = p (keep the drafter's token; accepted
for certain) or pi = q (defer to the verifier; SpS at that position), verified with the kernel's
GenSpecSample (docs/rules.md, F3). The tests read the temperature-1 untruncated laws p_bar,
q_bar as the official colab does (`probs_*_unscaled`); TV and pi use the sampling laws p, q.

    chow   defer iff max p_bar < 1 - alpha                      colab: "equation 2"
    diff   defer iff max p_bar < max q_bar - alpha              colab: "equation 5"
    opt    defer iff max p_bar < max q_bar - alpha TV(p, q)     colab: "equation 10"

alpha ranges (colab): chow [0, 1], diff [-1, 1] (-1 = SpS, 1 = drafter only), opt any real.
"""

from __future__ import annotations

from cactus_bench.samplers.params import TEST_LAW, Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder


def _alpha(doc: str, low: float | None, high: float | None) -> Param:
    return Param("alpha", float, doc, low=low, high=high)


class _SequenceCascade(Builder):
    def __init__(self, alpha: float = 0.5, test_law: str = "unscaled"):
        self._store(alpha=alpha, test_law=test_law)

    def defer(self, p, q, p_bar, q_bar):  # -> [..., 1] bool
        raise NotImplementedError

    def plan(self, p, q, p_bar, q_bar):
        from cactus_bench.samplers.kernel import against_target  # lazy: loads torch

        return against_target(p, q.where(self.defer(p, q, p_bar, q_bar), p))


class Chow(_SequenceCascade):
    info = RuleInfo(
        "chow",
        "speculative cascade, Chow: defer to q iff max p_bar < 1 - alpha, else pi = p",
        (_alpha("Chow's confidence margin (0 ~ SpS, 1 = drafter only)", 0.0, 1.0), TEST_LAW),
    )

    def defer(self, p, q, p_bar, q_bar):
        return p_bar.amax(-1, keepdim=True) < 1 - self.alpha


class Diff(_SequenceCascade):
    info = RuleInfo(
        "diff",
        "speculative cascade, Diff: defer iff max p_bar < max q_bar - alpha",
        (_alpha("confidence gap (-1 = SpS, 1 = drafter only)", -1.0, 1.0), TEST_LAW),
    )

    def defer(self, p, q, p_bar, q_bar):
        return p_bar.amax(-1, keepdim=True) < q_bar.amax(-1, keepdim=True) - self.alpha


class Opt(_SequenceCascade):
    info = RuleInfo(
        "opt",
        "speculative cascade, OPT: defer iff max p_bar < max q_bar - alpha TV(p, q)",
        (_alpha("weight of TV(p, q) (-inf = SpS, inf = drafter only)", None, None), TEST_LAW),
    )

    def defer(self, p, q, p_bar, q_bar):
        tv = (p - q).clamp(min=0).sum(-1, keepdim=True)
        return p_bar.amax(-1, keepdim=True) < q_bar.amax(-1, keepdim=True) - self.alpha * tv


BUILDERS = (Chow, Diff, Opt)
