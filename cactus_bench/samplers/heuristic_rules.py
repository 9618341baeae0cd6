"""Rules that accept by a threshold instead of a probability ratio: TAS, top-k, greedy.

tas     Medusa / vLLM V0 typical acceptance: accept iff q(n) > min(eps, alpha exp(-H(q))),
        H(q) = -sum q log(q + 1e-5); recover with argmax q; bonus ~ q. Paper Prop. 4 reads it
        as cross-entropy-constrained acceptance, which drives h toward zero entropy.
topk    accept iff q(n) is among q's top k; recover from norm(max(0, 1[top-k] - p)); bonus ~ q.
greedy  accept iff n = argmax q; recover and bonus with argmax q (temperature 0).
"""

from __future__ import annotations

import math

import torch

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.declared import GREEDY, TAS, TOPK, Declared
from cactus_bench.samplers.exact import normalised, threshold_law
from cactus_bench.samplers.verify_inputs import DraftStats

_TAS_LOG_EPS = 1e-5  # the constant inside log(q + eps) in Medusa and vLLM V0


class TypicalAcceptance(Declared, AcceptanceRule):
    info = TAS
    deterministic_accept = True
    recovery_is_argmax = True

    def __init__(self, threshold: float = 0.09, alpha: float | None = None):
        # alpha's default follows the threshold: sqrt(threshold), the reference code's
        self._store(threshold=threshold)
        self._store(alpha=math.sqrt(self.threshold) if alpha is None else alpha)

    def accept_prob(self, stats: DraftStats) -> torch.Tensor:
        batch, m = stats.q_n.shape
        entropy = torch.empty(batch, m, dtype=stats.q_n.dtype, device=stats.q_n.device)
        for j in range(m):  # one [B, V] temporary at a time keeps extra memory O(B V)
            q_row = stats.target_probs[:, j].to(entropy.dtype) / stats.target_sums[:, j : j + 1]
            entropy[:, j] = -(q_row * torch.log(q_row + _TAS_LOG_EPS)).sum(-1)
        cutoff = torch.clamp(self.alpha * torch.exp(-entropy), max=self.threshold)
        return (stats.q_n > cutoff).to(stats.q_n.dtype)

    def _accepted(self, q: torch.Tensor) -> torch.Tensor:
        """[..., V] 0/1 float64: the tokens whose draft is accepted (q normalised)."""
        entropy = -(q * torch.log(q + _TAS_LOG_EPS)).sum(-1, keepdim=True)
        cutoff = torch.clamp(self.alpha * torch.exp(-entropy), max=self.threshold)
        return (q > cutoff).to(q.dtype)

    def acceptance_probability(self, p, q):
        p, q = normalised(p, q)
        return (p * self._accepted(q)).sum(-1)

    def emitted_law(self, p, q):
        p, q = normalised(p, q)
        return threshold_law(p, self._accepted(q), _one_hot_argmax(q))[1]


class TopK(Declared, AcceptanceRule):
    info = TOPK
    deterministic_accept = True

    def __init__(self, k: int = 5):
        self._store(k=k)

    def accept_prob(self, stats: DraftStats) -> torch.Tensor:
        m = stats.q_n.shape[1]
        rows = stats.target_probs[:, :m]
        k = min(self.k, rows.shape[-1])
        kth = rows.topk(k, dim=-1).values[..., -1].to(stats.q_n.dtype)
        kth = kth / stats.target_sums[:, :m]  # [B, m], normalised like q_n
        return ((stats.q_n >= kth) & (stats.q_n > 0)).to(stats.q_n.dtype)

    def _top_set(self, q_row: torch.Tensor) -> torch.Tensor:
        k = min(self.k, q_row.shape[-1])
        kth = q_row.topk(k, dim=-1).values[..., -1:]
        return ((q_row >= kth) & (q_row > 0)).to(q_row.dtype)  # [R, V] indicator of top-k

    def recovery_weights(self, p_row, q_row, n, q_n, p_n) -> torch.Tensor:
        return self._top_set(q_row) - p_row

    def fallback_weights(self, q_row, n) -> torch.Tensor:
        return self._top_set(q_row)

    def acceptance_probability(self, p, q):
        p, q = normalised(p, q)
        return (p * self._top_set(q)).sum(-1)

    def emitted_law(self, p, q):
        p, q = normalised(p, q)
        top = self._top_set(q)
        recovery = (top - p).clamp(min=0)
        recovery = torch.where(recovery.sum(-1, keepdim=True) > 0, recovery, top)
        return threshold_law(p, top, recovery)[1]


class Greedy(Declared, AcceptanceRule):
    info = GREEDY
    deterministic_accept = True
    recovery_is_argmax = True
    bonus_is_argmax = True

    def accept_prob(self, stats: DraftStats) -> torch.Tensor:
        m = stats.q_n.shape[1]
        argmax = stats.target_probs[:, :m].argmax(dim=-1)
        return (argmax == stats.draft_token_ids).to(stats.q_n.dtype)

    def acceptance_probability(self, p, q):
        p, q = normalised(p, q)
        return (p * _one_hot_argmax(q)).sum(-1)

    def emitted_law(self, p, q):
        return _one_hot_argmax(normalised(p, q)[1])


def _one_hot_argmax(q: torch.Tensor) -> torch.Tensor:
    """[..., V] float64 indicator of argmax q (first index on ties, as torch.argmax)."""
    return torch.zeros_like(q).scatter_(-1, q.argmax(-1, keepdim=True), 1.0)


RULES = (TypicalAcceptance, TopK, Greedy)  # the registry collects them (as BUILDERS)
