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

import dataclasses

import torch

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.declared import CACTUS, CACTUS_EXACT, INTERP, SPS, Declared
from cactus_bench.samplers.divergences import exact_gamma, taylor_gamma
from cactus_bench.samplers.exact import boosted_acceptance, boosted_law, normalised
from cactus_bench.samplers.guards import (
    NO_GUARDS,
    guarded_law,
    near_top_mask,
    stop_mask,
    stop_plan,
    stop_target,
)
from cactus_bench.samplers.verify_inputs import DraftStats


class TargetRule(Declared, AcceptanceRule):
    """Accept with min(1, h(n)/p(n)); recover from norm(max(0, h - p)). SpS is h = q."""

    info = SPS
    verifies_target = True
    target_moves_with_draft = True  # h depends on the drafted n (Cactus); not for SpS, interp

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

    # ---- the guards (samplers/guards.py) -------------------------------------------------------
    def verify(self, draft_token_ids, draft_probs, target_probs, generator=None, **kwargs):
        """The base chain; with stop=exact, or guards on a target that does not move with the
        draft (SpS, interp), the kernel's chain on this rule's plan (`_PlanView`)."""
        guarded = self.guards != NO_GUARDS or kwargs.get("relax") is not None
        if guarded and (self.guards.stop_exact or not self.target_moves_with_draft):
            if self._plan_view is None:
                self.with_guards(self.guards)  # builds it
            view = self._plan_view
            return view.verify(draft_token_ids, draft_probs, target_probs, generator, **kwargs)
        return super().verify(draft_token_ids, draft_probs, target_probs, generator, **kwargs)

    _plan_view = None

    def with_guards(self, guards, stop_ids=None):
        """As the base's; also builds the plan view the guarded chain runs (not while traced)."""
        from cactus_bench.samplers.kernel import PlanRule  # lazy: kernel imports base

        super().with_guards(guards, stop_ids)
        view = PlanRule(_PlanView(self))  # its plan applies stop=exact, the chain the rest
        view.verifies_target = True
        view.guards = dataclasses.replace(guards, stop="off")
        self._plan_view = view
        return self

    def guarded_accept(self, stats: DraftStats, relax, accept, reuse):
        """SpS's h(n) = q(n) where the position is not relaxed or n is off the top (near_top);
        the recovery then rebuilds h from q(n) (scale 1): SpS's residual there."""
        use = relax
        if self.guards.near_top > 0:
            m = stats.q_n.shape[1]
            q_max = stats.target_probs[:, :m].amax(-1).to(stats.q_n.dtype)
            q_max = q_max / stats.target_sums[:, :m]  # [B, m], normalised like q_n
            near = near_top_mask(stats.q_n, q_max, self.guards.near_top)
            use = near if use is None else use & near
        if use is None:
            return accept, reuse
        h_n = torch.where(use, reuse, stats.q_n.to(reuse.dtype))
        ratio = torch.where(stats.p_n > 0, h_n / stats.p_n, (h_n > 0).to(h_n.dtype))
        return ratio.clamp(max=1.0), h_n

    def token_law(self, p, q):
        """(a [..., V], law [..., V]) from normalised rows, no host read: a(v) = min(1, h_v(v) /
        p(v)) and the emitted law (exact.boosted_law)."""
        gamma = self.boosted(q, p).to(torch.float64)
        safe = torch.where(p > 0, p, torch.ones_like(p))
        accept = torch.where(p > 0, gamma / safe, torch.ones_like(p)).clamp(max=1.0)
        return accept, boosted_law(p, q, gamma)

    def fallback_weights(self, q_row, n) -> torch.Tensor:
        return q_row

    # Exact statistics: h_x(x) = boosted(q(x), p(x)) for every candidate x at once. A subclass
    # whose target is not "boost n, rescale q" (it overrides target_row) overrides emitted_law.
    def acceptance_probability(self, p, q):
        if self.guards != NO_GUARDS:
            return self.acceptance_and_law(p, q)[0]
        p, q = normalised(p, q)
        return boosted_acceptance(p, self.boosted(q, p).to(torch.float64))

    def emitted_law(self, p, q):
        if self.guards != NO_GUARDS:
            return self.acceptance_and_law(p, q)[1]
        p, q = normalised(p, q)
        return boosted_law(p, q, self.boosted(q, p).to(torch.float64))

    def acceptance_and_law(self, p, q):
        """([...] beta, [..., V] law); with guards, G1-G2 (stop ids index these rows)."""
        if self.guards == NO_GUARDS:
            return self.acceptance_probability(p, q), self.emitted_law(p, q)
        p, q = normalised(p, q)
        if self.guards.stop_exact or not self.target_moves_with_draft:
            accept, residual = _PlanView(self).plan(p, q, None, None)
            return guarded_law(p, q, accept, residual, dataclasses.replace(self.guards, stop="off"))
        gamma = self.boosted(q, p).to(torch.float64)  # near_top alone: SpS's h = q off the top
        gamma = torch.where(q >= self.guards.near_top * q.amax(-1, keepdim=True), gamma, q)
        return boosted_acceptance(p, gamma), boosted_law(p, q, gamma)


class SpS(TargetRule):
    info = SPS
    target_moves_with_draft = False


class Cactus(TargetRule):
    """The paper's closed form; can exceed the KL budget when gamma > 1/2 (Corollary 6)."""

    info = CACTUS
    target_moves_with_draft = True

    def __init__(self, delta: float = 1.0):
        self._store(delta=delta)

    def boosted(self, q_n, p_n):
        return taylor_gamma(q_n, self.delta)


class CactusExact(TargetRule):
    """Exact largest gamma for the chosen f-divergence: D_f(h || q) <= delta always holds."""

    info = CACTUS_EXACT

    def __init__(self, delta: float = 1.0, divergence: str = "kl"):
        self._store(delta=delta, divergence=divergence)

    def boosted(self, q_n, p_n):
        # float64 so the certified bound survives; the callers promote to float64 with it.
        return exact_gamma(q_n, self.delta, self.divergence)


class Interpolation(TargetRule):
    """h = alpha p + (1 - alpha) q: lossy toward the drafter by a fixed mixture weight."""

    info = INTERP
    target_moves_with_draft = False

    def __init__(self, alpha: float = 0.5):
        self._store(alpha=alpha)

    def boosted(self, q_n, p_n):
        return self.alpha * p_n + (1 - self.alpha) * q_n

    def target_row(self, p_row, q_row, n, q_n, p_n, gamma=None):
        return self.alpha * p_row + (1 - self.alpha) * q_row

    def emitted_law(self, p, q):
        # h does not depend on the draft, so the chain emits h exactly (the SpS argument).
        if self.guards != NO_GUARDS:
            return self.acceptance_and_law(p, q)[1]
        p, q = normalised(p, q)
        return self.alpha * p + (1 - self.alpha) * q

    def token_law(self, p, q):
        target = self.alpha * p + (1 - self.alpha) * q
        safe = torch.where(p > 0, p, torch.ones_like(p))
        return torch.where(p > 0, target / safe, torch.ones_like(p)).clamp(max=1.0), target


@dataclasses.dataclass(frozen=True)
class _Named:
    name: str


class _PlanView:
    """A TargetRule as a builder of samplers/rules/ (kernel.PlanRule runs it): per token a(v) =
    min(1, h_v(v) / p(v)) and, with stop=exact, guards.stop_plan from its emitted law; without,
    GenSpecSample against its law (SpS, interp: h does not move with the draft)."""

    reads_unscaled = False
    deterministic_accept = False

    def __init__(self, rule: TargetRule):
        self.rule = rule
        self.info = _Named(rule.name)
        self.full_rows = rule.guards.stop_exact  # the stop ids index the whole vocabulary

    def params(self) -> dict:
        return self.rule.params()

    def plan(self, p, q, p_bar, q_bar):
        accept, law = self.rule.token_law(p, q)
        if not self.rule.guards.stop_exact:
            return accept, (law - p).clamp(min=0)
        stop = stop_mask(self.rule.stop_ids_or_raise(), p.shape[-1], p.device)
        if not self.rule.target_moves_with_draft:  # GenSpecSample against pi' accepts most
            from cactus_bench.samplers.kernel import against_target  # lazy: kernel imports base

            return against_target(p, stop_target(law, q, stop))
        return stop_plan(p, q, accept, law, stop)


RULES = (SpS, Cactus, CactusExact, Interpolation)  # the registry collects them (as BUILDERS)
