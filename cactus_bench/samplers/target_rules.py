"""Rules that verify against a target distribution h (paper §2.1): SpS, Cactus, interpolation.

For any target h the drafted token n is accepted with min(1, h(n) / p(n)) and the first rejected
position recovers from norm(max(0, h - p)); the emitted token then follows h exactly.
  sps           h = q                                          (Leviathan et al.; Chen et al.)
  cactus        h(n) = min(1, q + sqrt(2 delta q (1 - q)))     (Corollary 5, Taylor root)
  cactus_exact  h(n) = largest gamma with D_f(h || q) <= delta  (Theorem 2, exact root)
  interp        h = alpha p + (1 - alpha) q                    (the reference code's baseline)
For the Cactus rules the other tokens keep q's shape: h(x) = q(x) (1 - gamma) / (1 - q(n)).
"""

from __future__ import annotations

import torch

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.divergences import exact_gamma, taylor_gamma
from cactus_bench.samplers.exact import boosted_acceptance, boosted_law, normalised
from cactus_bench.samplers.verify_inputs import DraftStats


class TargetRule(AcceptanceRule):
    """Accept with min(1, h(n)/p(n)); recover from norm(max(0, h - p)). SpS is h = q."""

    name = "sps"

    def boosted(self, q_n: torch.Tensor, p_n: torch.Tensor) -> torch.Tensor:
        """h(n) for each drafted token; same shape as q_n."""
        return q_n

    def target_row(self, p_row, q_row, n, q_n, p_n, gamma=None) -> torch.Tensor:
        """[R, V] the full target h at a position: gamma at n, q rescaled elsewhere (gamma [R]:
        h(n), computed here unless the chain passes the one its acceptance computed)."""
        gamma = self.boosted(q_n, p_n) if gamma is None else gamma  # [R]
        # (1 - gamma) / (1 - q(n)); q(n) = 1 leaves no mass elsewhere, so the scale is moot.
        scale = torch.where(q_n < 1, (1 - gamma) / (1 - q_n), torch.zeros_like(gamma))
        h_row = q_row * scale.unsqueeze(-1)
        return h_row.scatter(-1, n.unsqueeze(-1), gamma.unsqueeze(-1).to(h_row.dtype))

    def accept_prob(self, stats: DraftStats) -> torch.Tensor:
        return self.accept_prob_and_reuse(stats)[0]

    def accept_prob_and_reuse(self, stats: DraftStats):
        """(acceptance [B, m], h(n) [B, m]): the recovery reuses h(n) at its position."""
        h_n = self.boosted(stats.q_n, stats.p_n)  # [B, m]
        # p(n) = 0 cannot be drafted; define the ratio as 1 when h(n) > 0 so nothing is NaN.
        ratio = torch.where(stats.p_n > 0, h_n / stats.p_n, (h_n > 0).to(h_n.dtype))
        return ratio.clamp(max=1.0), h_n

    def recovery_weights(self, p_row, q_row, n, q_n, p_n, h_n=None) -> torch.Tensor:
        return self.target_row(p_row, q_row, n, q_n, p_n, h_n) - p_row

    def fallback_weights(self, q_row, n) -> torch.Tensor:
        return q_row

    # Exact statistics: h_x(x) = boosted(q(x), p(x)) for every candidate x at once. A subclass
    # whose target is not "boost n, rescale q" (it overrides target_row) overrides emitted_law.
    def acceptance_probability(self, p, q):
        p, q = normalised(p, q)
        return boosted_acceptance(p, self.boosted(q, p).to(torch.float64))

    def emitted_law(self, p, q):
        p, q = normalised(p, q)
        return boosted_law(p, q, self.boosted(q, p).to(torch.float64))


class SpS(TargetRule):
    name = "sps"


class Cactus(TargetRule):
    """The paper's closed form; can exceed the KL budget when gamma > 1/2 (Corollary 6)."""

    name = "cactus"

    def __init__(self, delta: float = 1.0):
        self.delta = float(delta)  # range: the catalogue's, checked once by make_sampler

    def params(self) -> dict:
        return {"delta": self.delta}

    def boosted(self, q_n, p_n):
        return taylor_gamma(q_n, self.delta)


class CactusExact(TargetRule):
    """Exact largest gamma for the chosen f-divergence: D_f(h || q) <= delta always holds."""

    name = "cactus_exact"

    def __init__(self, delta: float = 1.0, divergence: str = "kl"):
        self.delta = float(delta)  # ranges and choices: the catalogue's, checked by make_sampler
        self.divergence = divergence

    def params(self) -> dict:
        return {"delta": self.delta, "divergence": self.divergence}

    def boosted(self, q_n, p_n):
        # float64 so the certified bound survives; the callers promote to float64 with it.
        return exact_gamma(q_n, self.delta, self.divergence)


class Interpolation(TargetRule):
    """h = alpha p + (1 - alpha) q: lossy toward the drafter by a fixed mixture weight."""

    name = "interp"

    def __init__(self, alpha: float = 0.5):
        self.alpha = float(alpha)  # range: the catalogue's, checked once by make_sampler

    def params(self) -> dict:
        return {"alpha": self.alpha}

    def boosted(self, q_n, p_n):
        return self.alpha * p_n + (1 - self.alpha) * q_n

    def target_row(self, p_row, q_row, n, q_n, p_n, gamma=None):
        return self.alpha * p_row + (1 - self.alpha) * q_row

    def emitted_law(self, p, q):
        # h does not depend on the draft, so the chain emits h exactly (the SpS argument).
        p, q = normalised(p, q)
        return self.alpha * p + (1 - self.alpha) * q
