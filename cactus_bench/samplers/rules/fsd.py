"""Fuzzy speculative decoding (Holsman, Huang, Dhingra; ACL Findings 2025): released, reducible.

The official code (maxholsman/fsd, `fsd_utils.py::_speculative_backoff_sampling`) accepts the
draft iff a divergence between the two full laws at that position is at most T, whatever the
drafted token, and otherwise samples q itself (docs/rules.md, F4):

    fsd             a(v) = 1[Div(p_bar, q_bar) <= T],  r = q
    fsd_reducible   a(v) = 1 if Div <= T else min(1, q(v) / p(v)),  r = (q - p)+
                    (Xia et al. 2026's "r-fuzzy": the same law, more accepts, SpS as T -> -inf)
    fsd_unsmoothed  fsd with Div on the laws as given (infinite where a law is 0: not released)

Both emit pi = p where Div <= T and q elsewhere. Div reads the untruncated temperature-1 laws
unless test_law=processed (the code's `*_processed` types). Before any divergence the release
smooths both laws, `x = (x + 1e-10) / sum(x + 1e-10)` (its `epsilon = 1e-10`, on every
`*_processed` type and whenever the divergence's laws went through a top-k / top-p warper), so
a law with zeros (a truncated p, a drafter head smaller than the vocabulary) gives a finite
divergence; `fsd` and `fsd_reducible` always smooth (on untruncated softmax rows the smoothing
moves Div by O(V 1e-10)). Divergences, in nats, as the code computes them with
F.kl_div(log input, target) = KL(target || input):
    js          0.5 KL(m || q) + 0.5 KL(m || p), m = (p + q) / 2  (the code's form, not the
                textbook JSD; the README's example threshold is 0.4)
    kl          KL(p || q);   reverse_kl   KL(q || p);   tv   0.5 sum |p - q|
The release forks HF transformers 4.44 assisted generation, whose drafter decodes greedily
(`do_sample = False`): its drafted token is argmax p, where this harness samples n ~ p.
"""

from __future__ import annotations

from cactus_bench.samplers.params import TEST_LAW, Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder

FSD_DIVERGENCES = ("js", "kl", "reverse_kl", "tv")
RELEASE_EPSILON = 1e-10  # fsd_utils.py: `epsilon = 1e-10` added to both laws before Div
_PARAMS = (
    Param("threshold", float, "divergence threshold T in nats", low=0.0),
    Param("div", str, "FSD's divergence", choices=FSD_DIVERGENCES, column="fsd_div"),
    TEST_LAW,
)


def fsd_divergence(p, q, div: str, smoothing: float = RELEASE_EPSILON):
    """[..., V] laws -> [..., 1] Div(p, q) as the FSD code computes it (module doc): each law
    smoothed to (x + smoothing) / sum(x + smoothing) first (0: the laws as given)."""
    import torch  # lazy: keeps torch out of the catalogue

    if smoothing > 0:
        p = (p + smoothing) / (p + smoothing).sum(-1, keepdim=True)
        q = (q + smoothing) / (q + smoothing).sum(-1, keepdim=True)

    def kl(a, b):  # KL(a || b), 0 log 0 = 0, inf where a > 0 = b
        return (torch.special.xlogy(a, a) - torch.special.xlogy(a, b)).sum(-1, keepdim=True)

    if div == "js":
        middle = (p + q) / 2
        return 0.5 * kl(middle, q) + 0.5 * kl(middle, p)
    if div == "kl":
        return kl(p, q)
    if div == "reverse_kl":
        return kl(q, p)
    return 0.5 * (p - q).abs().sum(-1, keepdim=True)


class Fsd(Builder):
    info = RuleInfo(
        "fsd",
        "fuzzy SD as released: accept iff Div(p, q) <= T (laws smoothed by 1e-10), else sample q",
        _PARAMS,
    )
    deterministic_accept = True
    smoothing = RELEASE_EPSILON
    # The smoothing spreads 1e-10 over the whole vocabulary: the kernel must not drop the
    # columns where p = q = 0 (its shortcut for the other rules), or Div would move.
    full_rows = True

    def __init__(self, threshold: float = 0.4, div: str = "js", test_law: str = "unscaled"):
        self._store(threshold=threshold, div=div, test_law=test_law)

    def close(self, p_bar, q_bar):  # [..., 1] bool: the position is accepted outright
        return fsd_divergence(p_bar, q_bar, self.div, self.smoothing) <= self.threshold

    def plan(self, p, q, p_bar, q_bar):
        return self.close(p_bar, q_bar).to(p.dtype).expand_as(p), q


class FsdReducible(Fsd):
    info = RuleInfo(
        "fsd_reducible",
        "fuzzy SD, reducible: accept iff Div <= T, else the SpS test with residual (q - p)+",
        _PARAMS,
    )
    deterministic_accept = False

    def plan(self, p, q, p_bar, q_bar):
        from cactus_bench.samplers.kernel import against_target  # lazy: loads torch

        return against_target(p, p.where(self.close(p_bar, q_bar), q))


class FsdUnsmoothed(Fsd):
    info = RuleInfo(
        "fsd_unsmoothed",
        "fuzzy SD without the release's smoothing: Div = inf wherever a law is 0 (never accepts)",
        _PARAMS,
    )
    smoothing = 0.0


BUILDERS = (Fsd, FsdReducible, FsdUnsmoothed)
