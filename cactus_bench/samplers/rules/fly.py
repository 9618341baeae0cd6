"""FLy, training-free loosely speculative decoding (Li et al., ICLR 2026, arXiv 2511.22972): an
entropy gate with a deferred window, as shipped in vLLM (`vllm/v1/spec_decode/fly.py`, the
sampled-draft kernel `apply_fly_random_acceptance_kernel`; `rejection_sample_method="fly"`).

Each drafted token n_j first gets the native SpS decision, u_j < min(1, q_j(n_j) / p_j(n_j)).
A native rejection at position j (0-based, m drafts) is overridden, i.e. the draft accepted,
when all of these hold (the kernel's `can_defer`):

    p_j(n_j) > 0 and q_j(n_j) > 0          the verifier does not rule the token out
    j + W < m                               the whole window lies inside this draft
    H3(q_j) >= theta                        the entropy gate: several plausible tokens
    the next W drafts are natively accepted (each with its own u): the verifier, conditioned
                                            on the mismatch, agrees again (its "self-correction")

with H3(q) = -sum over the 3 largest q(v) of q(v) log q(v), on the verifier's processed law
(temperature, top-k, top-p applied; not renormalised to the three), in nats. The first
rejected position after the overrides recovers from norm((q - p)+) and all m accepted draws the
bonus from q: the native sampler's, unchanged. Defaults are vLLM's: theta = 0.3, W = 6 (vLLM
requires W < m and defaults to min(6, m - 1); here a window that does not fit never defers, so
W >= m is SpS), top 3. The deferral reads later positions' decisions, so a position has no law
of its own: the builder gives the native plan and `across_window` the override, which
`kernel.PlanRule.verify` applies to the whole window (docs/rules.md).

Not covered: vLLM's greedy variant (temperature 0: draft != argmax q_j deferred under the same
gate when the next W drafts equal their argmax), because the HF engine verifies every request of
temperature 0 with the `greedy` rule; and drafts without the drafter's law (vLLM's p = 1).
The formulas are vLLM's upstream kernel; the paper's two tiers (an "entropy-level gate", a
"token-level deferred window") match it, but its own code (AMD-AGI/FLy) was not read here.
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder

ENTROPY_TOP_K = 3  # vLLM `_FLY_ENTROPY_TOP_K`: the gate's entropy over the 3 largest q(v)


def top_entropy(q):
    """[..., V] normalised laws -> [...] H3(q) = -sum_{3 largest} q log q (module doc)."""
    import torch  # lazy: keeps torch out of the catalogue

    top = q.topk(min(ENTROPY_TOP_K, q.shape[-1]), dim=-1).values
    return -torch.special.xlogy(top, top).sum(-1)


class Fly(Builder):
    info = RuleInfo(
        "fly",
        "FLy: a native SpS rejection is accepted when H3(q) >= theta and the next W drafts pass",
        (
            # the run's `threshold` column, shared with TAS's epsilon and FSD's T
            Param(
                "entropy_threshold",
                float,
                "FLy's entropy gate theta in nats (vLLM fly_entropy_threshold)",
                low=0.0,
                column="threshold",
            ),
            Param(
                "window",
                int,
                "deferred window W (vLLM fly_window_size)",
                low=0,
                column="fly_window",
            ),
        ),
        per_position_law=False,  # the window reads later drafts: no one-position law
    )

    def __init__(self, entropy_threshold: float = 0.3, window: int = 6):
        self._store(entropy_threshold=entropy_threshold, window=window)

    def plan(self, p, q, p_bar, q_bar):  # the native decision and residual: SpS's
        from cactus_bench.samplers.kernel import against_target  # lazy: loads torch

        return against_target(p, q)

    def across_window(self, native, draft_probs, target_probs, ids):
        """[B, m] bool native decisions -> [B, m] bool FLy's (module doc).

        draft_probs [B, m, V], target_probs [B, m + 1, V] (rows not normalised), ids [B, m]."""
        import torch  # lazy: keeps torch out of the catalogue

        m = native.shape[1]
        if self.window >= m:  # no window fits inside the draft: nothing can be deferred
            return native
        dtype = torch.float64 if target_probs.dtype == torch.float64 else torch.float32
        q = target_probs[:, :m].to(dtype)
        q = q / q.sum(-1, keepdim=True)  # [B, m, V] the verifier's processed laws
        index = ids.unsqueeze(-1)
        q_n = q.gather(-1, index).squeeze(-1)  # [B, m]
        p_n = draft_probs.gather(-1, index).squeeze(-1)  # [B, m] (> 0 is all that is read)
        gate = (top_entropy(q) >= self.entropy_threshold) & (p_n > 0) & (q_n > 0) & ~native
        # window[j] = all native decisions j + 1 .. j + W hold, for j = 0 .. m - 1 - W
        if self.window == 0:
            window = torch.ones_like(native)
        else:
            window = native[:, 1:].unfold(1, self.window, 1).all(-1)  # [B, m - W]
        fits = torch.zeros_like(native)
        fits[:, : m - self.window] = window
        return native | (gate & fits)


BUILDERS = (Fly,)
