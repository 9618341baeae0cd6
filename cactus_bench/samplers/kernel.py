"""One verification kernel for the rules of `samplers/rules/`: a per-token acceptance, one residual.

Every rule there decides, at one position, an acceptance probability a(v) for each token v the
drafter could propose and ONE residual distribution r that does not depend on the drafted token
(docs/rules.md, F0). `PlanRule.decide` hands them to the chain every rule runs (`chain.py`):

    u_j ~ U[0, 1)                  one draw per position, [B, m]
    accepted_j = u_j < a_j(n_j)    (a in {0, 1} for the deterministic rules: FSD, BiLD)
    k = number of leading accepts
    token k ~ norm(r_k) if k < m  else  the bonus ~ q_m

and the emitted token's law has the closed form (`exact.threshold_law`)

    law = p a + (1 - sum_v p(v) a(v)) norm(r),      beta = sum_v p(v) a(v).

"Verify against a target pi" (GenSpecSample; Narasimhan et al. 2025, Leviathan et al. 2023) is
the case a = min(1, pi / p), r = (pi - p)+, for which law = pi exactly (`against_target`). A
rule file supplies a builder: its catalogue entry, its parameters, and `plan(p, q, p_bar, q_bar)`
returning (a, r) for rows of any leading shape. p_bar, q_bar are the laws the rule's tests read:
the temperature-1 untruncated laws where the source reads those (`reads_unscaled`), else p, q.

The bonus token (all m drafts accepted) is drawn from q, as in every reference implementation:
the rules' pi needs the drafter's law at position m + 1, which the loop never computes.

A builder may also define `across_window(accepted, draft_probs, target_probs, ids)`: [B, m] bool
decisions in, [B, m] bool out, for a rule whose decision at position j reads the decisions after
it (FLy's deferred window, `rules/fly.py`). The chain applies it to the per-position decisions
before the accepted prefix is counted; such a rule has no law per position, so its exact
statistics raise (test it through `verify`).
One chain draws in one order for every rule (torch.rand [B, m], then one uniform per row), so a
builder whose plan is SpS's returns SpS's tokens for one generator.
"""

from __future__ import annotations

from functools import partial

import torch

from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.samplers.chain import Decisions, LastToken, Prefix
from cactus_bench.samplers.exact import normalised, threshold_law
from cactus_bench.samplers.guards import (  # against_target: the rules import it from here
    NO_GUARDS,
    against_target,
    guarded_law,
    near_top_mask,
    sps_plan,
    stop_mask,
    stop_target,
)
from cactus_bench.samplers.verify_inputs import UNSCALED_NAMES, VerifyCall


class PlanRule(AcceptanceRule):
    """An acceptance rule from a builder of `samplers/rules/` (module doc)."""

    def __init__(self, builder):
        self.builder = builder
        self.name = builder.info.name
        self.deterministic_accept = getattr(builder, "deterministic_accept", False)

    def params(self) -> dict:
        return self.builder.params()

    @property
    def reads_window(self) -> bool:
        """True when a position's decision reads the later positions' (module doc)."""
        return hasattr(self.builder, "across_window")

    def _per_position(self) -> None:
        if self.reads_window:
            raise NotImplementedError(
                f"rule {self.name!r} decides a position from the decisions after it (its "
                "window): it has no acceptance or law per position; measure it through verify"
            )

    @property
    def reads_unscaled(self) -> bool:
        """True when the engine must pass the temperature-1 laws to `verify`."""
        return self.builder.reads_unscaled

    # ---- exact statistics ----------------------------------------------------------------------
    def plan(self, p, q, p_bar=None, q_bar=None, check=True) -> tuple[torch.Tensor, torch.Tensor]:
        """(a, r) [..., V] float64 from rows p, q (normalised here) and the test laws; check=False
        skips the laws' checks (host reads)."""
        p, q = normalised(p, q, check)
        p_bar, q_bar = self._test_laws(p, q, p_bar, q_bar, check)
        accept, residual = self.builder.plan(p, q, p_bar, q_bar)
        # A residual with no mass is never used when nothing can be rejected; q keeps it valid.
        empty = residual.sum(-1, keepdim=True) <= 0
        return accept.clamp(0.0, 1.0), torch.where(empty, q, residual)

    def acceptance_and_law(self, p, q, p_bar=None, q_bar=None):
        """([...] beta, [..., V] law) from one plan: what the frontier needs of a rule per block,
        where the plan on full rows is the expensive part. With guards: G1-G2 (stop ids index
        these rows' vocabulary)."""
        self._per_position()
        accept, residual = self.plan(p, q, p_bar, q_bar)
        p, q = normalised(p, q)
        if self.guards == NO_GUARDS:
            return threshold_law(p, accept, residual)
        stop = None
        if self.guards.stop_exact:
            stop = stop_mask(self.stop_ids_or_raise(), p.shape[-1], p.device)
        return guarded_law(p, q, accept, residual, self.guards, stop)

    def acceptance_probability(self, p, q, p_bar=None, q_bar=None) -> torch.Tensor:
        self._per_position()
        if self.guards != NO_GUARDS:
            return self.acceptance_and_law(p, q, p_bar, q_bar)[0]
        accept, _ = self.plan(p, q, p_bar, q_bar)
        return (normalised(p, q)[0] * accept).sum(-1)

    def emitted_law(self, p, q, p_bar=None, q_bar=None) -> torch.Tensor:
        return self.acceptance_and_law(p, q, p_bar, q_bar)[1]

    def output_distribution(self, p, q, p_bar=None, q_bar=None) -> torch.Tensor:
        """[V] float64: sum_n p(n) [1{x = n} a(n) + (1 - a(n)) norm(r)(x)], candidate by
        candidate (the [V, V] reference the batched law is tested against)."""
        if p.dim() != 1 or q.dim() != 1 or p.shape != q.shape:
            raise ValueError(f"p and q must be 1-D of equal size; got {tuple(p.shape)}, {q.shape}")
        self._per_position()
        accept, residual = self.plan(p, q, p_bar, q_bar)
        p64 = normalised(p, q)[0]
        recovery = residual / residual.sum()
        law = torch.zeros_like(p64)
        for n in torch.nonzero(p64 > 0).flatten().tolist():
            law[n] += p64[n] * accept[n]
            law += p64[n] * (1 - accept[n]) * recovery
        return law

    def _test_laws(self, p, q, p_bar, q_bar, check=True):
        if not self.reads_unscaled:
            return p, q
        if p_bar is None or q_bar is None:
            raise ValueError(
                f"rule {self.name!r} reads the temperature-1 laws (test_law=unscaled), which this "
                "caller does not pass; pass them or set sampler.test_law=processed"
            )
        return normalised(p_bar, q_bar, check)

    # ---- the chain -----------------------------------------------------------------------------
    def decide(self, call: VerifyCall) -> Decisions:
        """One plan (a, r) [B, m, V] at every position: a(n) of each draft, the residual at
        each row's position k, the bonus from q as given (float64). A deterministic builder's a
        is 0 or 1 and still meets a uniform (the draw order stays SpS's; the guards mix in SpS).

        support_width: an upper bound on each row's |{p > 0} u {q > 0}| (2 k under top-k
        truncation): the plan then runs on that many columns per row, a static shape. None:
        the bound is read from the data when check=True (a host read), else full rows.
        relax and the rule's guards: `_guarded` (samplers/guards.py)."""
        ids, draft_probs, target_probs = call.ids, call.draft_probs, call.target_probs
        m = ids.shape[1]
        laws = (draft_probs, target_probs[:, :m])  # [B, m, V] each
        if self.reads_unscaled:
            tests = call.unscaled.get(UNSCALED_NAMES[0]), call.unscaled.get(UNSCALED_NAMES[1])
            self._test_laws(*laws, *tests, check=False)  # raises when the engine passed none
            accept, residual = self.plan(*laws, tests[0], tests[1][:, :m], check=call.check)
        elif getattr(self.builder, "full_rows", False):
            accept, residual = self.plan(*laws, check=call.check)
        else:
            accept, residual = self._plan_on_support(*laws, call.support_width, call.check)
        accept, residual = self._guarded(laws, accept, residual, ids, call.relax)

        def last_token(at: Prefix) -> LastToken:
            bonus = target_probs[at.rows, at.num_accepted].to(torch.float64)  # [B, V]
            return LastToken(bonus, residual[at.rows, at.position])

        window = None
        if self.reads_window:  # FLy: a rejection overridden by the decisions after it
            laws_and_ids = {"draft_probs": draft_probs, "target_probs": target_probs, "ids": ids}
            window = partial(self.builder.across_window, **laws_and_ids)
        a_n = accept.gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # [B, m]
        return Decisions(a_n, last_token, across_window=window)

    def _guarded(self, laws, accept, residual, ids, relax):
        """(a, r) [B, m, V] with the guards applied: stop=exact re-targets the plan's law to
        stop_target (GenSpecSample against it); then each drafted position keeps the rule's
        (a, r) where `relax` and near_top allow, and takes SpS's elsewhere."""
        guards = self.guards
        if guards == NO_GUARDS and relax is None:
            return accept, residual
        self.check_guardable()
        p, q = normalised(*laws, check=False)  # [B, m, V] float64
        if guards.stop_exact:
            law = threshold_law(p, accept, residual)[1]
            stop = stop_mask(self.stop_ids_or_raise(), p.shape[-1], p.device)
            accept, residual = against_target(p, stop_target(law, q, stop))
        use = relax
        if guards.near_top > 0:
            q_n = q.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
            near = near_top_mask(q_n, q.amax(-1), guards.near_top)  # [B, m]
            use = near if use is None else use & near
        if use is None:
            return accept, residual
        sps_accept, sps_residual = sps_plan(p, q)
        use = use.unsqueeze(-1)
        residual = torch.where(use, residual, sps_residual)
        empty = residual.sum(-1, keepdim=True) <= 0  # only where nothing can be rejected
        return torch.where(use, accept, sps_accept), torch.where(empty, q, residual)

    def _plan_on_support(self, p, q, width, check):
        """(a, r) [B, m, V] from the plan on each row's support only (columns where p > 0 or
        q > 0; a = r = 0 elsewhere, where no draft can land and no rule puts residual mass):
        with top-k 20 that is <= 40 columns of 49,152, and mentored decoding's search costs
        O(support) instead of O(V). The columns keep their order, padded with p = q = 0."""
        vocab = p.shape[-1]
        in_support = (p > 0) | (q > 0)  # [B, m, V]
        if check:  # the bound, read or checked (one host read)
            largest = int(in_support.sum(-1).max())
            if width is not None and largest > width:
                raise ValueError(
                    f"a row has {largest} tokens with p > 0 or q > 0, more than support_width="
                    f"{width}: pass 2 * top_k of both laws' truncation, or None"
                )
            width = largest if width is None else width
        if width is None or width >= vocab:
            return self.plan(p, q, check=check)
        # slot of each support column in its row, in order; the others go to slot `width`
        slot = in_support.long().cumsum(-1) - 1
        slot = torch.where(in_support & (slot < width), slot, width)
        columns = torch.arange(vocab, device=p.device).expand_as(slot)
        index = torch.full((*slot.shape[:-1], width + 1), vocab, device=p.device)
        index = index.scatter(-1, slot, columns)[..., :width]  # [B, m, W]; vocab: padding
        padding = index == vocab
        safe = index.clamp(max=vocab - 1)
        p_w, q_w = (torch.where(padding, 0.0, x.gather(-1, safe).to(torch.float64)) for x in (p, q))
        accept, residual = self.plan(p_w, q_w, check=check)
        full = torch.zeros((*slot.shape[:-1], vocab + 1), dtype=torch.float64, device=p.device)
        back = [full.scatter(-1, index, x)[..., :vocab] for x in (accept, residual)]
        return back[0], back[1]
