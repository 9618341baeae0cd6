"""FLy, training-free loosely speculative decoding (Li et al., ICLR 2026, arXiv 2511.22972): an
entropy gate with a deferred window, as shipped in vLLM: 0.33's `vllm/v1/spec_decode/fly.py`
(`apply_fly_random_acceptance_kernel`) and 0.34's rejection kernel
(`vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py`, lines 591-745, its
`pending_rejection` loop; `rejection_sample_method="fly"`).

Each drafted token n_j first gets the native SpS decision, u_j < min(1, q_j(n_j) / p_j(n_j)).
A native rejection at position j (0-based, m drafts) is overridden, i.e. the draft accepted,
when all of these hold (0.33's `can_defer`; 0.34 holds the rejection pending instead):

    p_j(n_j) > 0 and q_j(n_j) > 0          the verifier does not rule the token out
    j + W < m                               the whole window lies inside this draft
    H_k(q_j) >= theta                       the entropy gate: several plausible tokens
    the next W drafts are natively accepted (each with its own u): the verifier, conditioned
                                            on the mismatch, agrees again (its "self-correction")

with H_k(q) = -sum over the k largest q(v) of q(v) log q(v), on the verifier's processed law
(temperature, top-k, top-p applied; not renormalised to the k), in nats. The first rejected
position after the overrides recovers from norm((q - p)+) and all m accepted draws the bonus
from q: the native sampler's, unchanged. Parameters and defaults are vLLM's (its
`SpeculativeConfig`): theta = 0.3 (`fly_entropy_threshold`), k = 3 (`fly_entropy_top_k`,
>= 1), W = min(6, m - 1) (`fly_window_size`, >= 1; `window="auto"` here, resolved from the
drafts' shape at verify time and by the run's checks before anything loads, so the row records
the W it ran). vLLM's config refuses W >= m and m < 2 with a ValueError, and so do the run's
checks (`window_for`, where m is known); W = 0, which its config forbids and its 0.34 kernel
reads as plain SpS, is refused when the rule is built. A step whose draft is shorter than m
(the token budget's last) defers nothing where no window fits, as in vLLM's kernel; `auto` in
the Python API takes m from each step's drafts, so pass W itself there when drafts vary.
The deferral reads later positions' decisions, so a position has no law of its own: the
builder gives the native plan and `across_window` the override, which `kernel.PlanRule.verify`
applies to the whole window (docs/rules.md).

Not covered: vLLM's greedy variant (temperature 0: draft != argmax q_j deferred under the same
gate when the next W drafts equal their argmax), because the HF engine verifies every request of
temperature 0 with the `greedy` rule; and drafts without the drafter's law (vLLM's p = 1).
The formulas are vLLM's upstream kernels; the paper's two tiers (an "entropy-level gate", a
"token-level deferred window") match them, but its own code (AMD-AGI/FLy) was not read here.
"""

from __future__ import annotations

from cactus_bench.samplers.params import Param, RuleInfo
from cactus_bench.samplers.rules._builder import Builder

ENTROPY_TOP_K = 3  # vLLM `fly_entropy_top_k`: the gate's entropy over the 3 largest q(v)
AUTO_WINDOW = "auto"  # vLLM's default window, min(MAX_AUTO_WINDOW, m - 1)
MAX_AUTO_WINDOW = 6


def window_for(window: int | str, m: int) -> int:
    """The deferred window W a draft of m tokens runs with: `auto` is vLLM's min(6, m - 1). A
    one-line ValueError, as vLLM's config raises, when m < 2 or W >= m (no window fits)."""
    if m < 2:
        raise ValueError(
            f"sampler fly needs m >= 2 (vLLM requires num_speculative_tokens >= 2: a deferred "
            f"rejection needs at least one draft after it); got m={m}, set m=2 or more"
        )
    resolved = min(MAX_AUTO_WINDOW, m - 1) if window == AUTO_WINDOW else int(window)
    if resolved >= m:
        raise ValueError(
            f"sampler fly needs window < m (vLLM refuses fly_window_size >= "
            f"num_speculative_tokens); got window={resolved} at m={m}: set sampler.window to "
            f"1..{m - 1} or to auto (min(6, m - 1) = {min(MAX_AUTO_WINDOW, m - 1)})"
        )
    return resolved


def top_entropy(q, k: int = ENTROPY_TOP_K):
    """[..., V] normalised laws -> [...] H_k(q) = -sum_{k largest} q log q (module doc)."""
    import torch  # lazy: keeps torch out of the catalogue

    top = q.topk(min(k, q.shape[-1]), dim=-1).values
    return -torch.special.xlogy(top, top).sum(-1)


class Fly(Builder):
    info = RuleInfo(
        "fly",
        "FLy: a native SpS rejection is accepted when H_k(q) >= theta and the next W drafts pass",
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
                "deferred window W, 1 <= W < m, or auto = min(6, m - 1) (vLLM fly_window_size)",
                low=1,
                choices=(AUTO_WINDOW,),
                column="fly_window",
            ),
            # no column of its own: the row's sampler_params JSON carries it
            Param(
                "entropy_top_k",
                int,
                "the largest q(v) the entropy gate sums over (vLLM fly_entropy_top_k)",
                low=1,
                column="",
            ),
        ),
        per_position_law=False,  # the window reads later drafts: no one-position law
        # `auto` resolved with the run's m, so rows record the W it decodes with; W >= m refused
        at_draft_length=lambda params, m: {**params, "window": window_for(params["window"], m)},
    )

    def __init__(
        self,
        entropy_threshold: float = 0.3,
        window: int | str = AUTO_WINDOW,
        entropy_top_k: int = ENTROPY_TOP_K,
    ):
        self._store(entropy_threshold=entropy_threshold, window=window, entropy_top_k=entropy_top_k)

    def plan(self, p, q, p_bar, q_bar):  # the native decision and residual: SpS's
        from cactus_bench.samplers.kernel import against_target  # lazy: loads torch

        return against_target(p, q)

    def across_window(self, native, draft_probs, target_probs, ids):
        """[B, m] bool native decisions -> [B, m] bool FLy's (module doc).

        draft_probs [B, m, V], target_probs [B, m + 1, V] (rows not normalised), ids [B, m]."""
        import torch  # lazy: keeps torch out of the catalogue

        m = native.shape[1]
        auto = self.window == AUTO_WINDOW
        width = min(MAX_AUTO_WINDOW, m - 1) if auto else self.window
        if not 1 <= width < m:  # a short draft (the budget's last step): no window fits, and
            return native  # vLLM's kernel (i + W < num_draft_tokens) defers nothing there
        dtype = torch.float64 if target_probs.dtype == torch.float64 else torch.float32
        q = target_probs[:, :m].to(dtype)
        q = q / q.sum(-1, keepdim=True)  # [B, m, V] the verifier's processed laws
        index = ids.unsqueeze(-1)
        q_n = q.gather(-1, index).squeeze(-1)  # [B, m]
        p_n = draft_probs.gather(-1, index).squeeze(-1)  # [B, m] (> 0 is all that is read)
        entropy = top_entropy(q, self.entropy_top_k)  # [B, m]
        gate = (entropy >= self.entropy_threshold) & (p_n > 0) & (q_n > 0) & ~native
        # window[j] = all native decisions j + 1 .. j + W hold, for j = 0 .. m - 1 - W
        window = native[:, 1:].unfold(1, width, 1).all(-1)  # [B, m - W]
        fits = torch.zeros_like(native)
        fits[:, : m - width] = window
        return native | (gate & fits)


BUILDERS = (Fly,)
