"""The interface every acceptance rule implements, and `verify`, which runs the shared chain.

A rule decides, for each drafted token n at position j, an acceptance probability a_j and, at the
first rejected position, a recovery distribution r_j; when all m drafts are accepted a bonus token
is drawn from the verifier's row m. `verify` checks the inputs, asks the rule for those pieces
(`decide`) and runs the chain of `chain.py` (u_j < a_j, the accepted prefix, the last token), the
one chain of every rule: the rules here decide from statistics through the hooks below, the
builders' plans of `samplers/rules/` through kernel.py's `PlanRule.decide`.

Memory: the rules here decide acceptance from q(n), p(n) and row statistics only ([B, m]); the
full-vocabulary recovery/bonus distribution is built once per row, at position k: extra memory
O(B V) (Cactus at V = 151,936 holds no [B, m, V] tensor). The caller may pass the draws
(`uniforms` [B, m + 1]) and skip the input checks (check=False): verify then reads nothing back
to the host and traces into one graph.
"""

from __future__ import annotations

from functools import partial

import torch

from cactus_bench.samplers.chain import (
    Decisions,
    LastToken,
    Prefix,
    VerifyOutput,
    verify_chain,
)
from cactus_bench.samplers.guards import NO_GUARDS, Guards
from cactus_bench.samplers.verify_inputs import (
    DraftStats,
    VerifyCall,
    check_shapes,
    check_unscaled_names,
    draft_stats,
)


class AcceptanceRule:
    """Base class: subclasses implement `accept_prob` and the recovery/bonus hooks."""

    name: str = "base"
    deterministic_accept: bool = False  # accept_prob is an indicator: no uniform draw (TAS...)
    recovery_is_argmax: bool = False  # recover with argmax q (TAS, greedy)
    bonus_is_argmax: bool = False  # bonus with argmax q (greedy)
    verifies_target: bool = False  # in the target family: the guards compose with it
    guards: Guards = NO_GUARDS  # set with `with_guards` (samplers/guards.py)
    stop_ids: torch.Tensor | None = None  # [S] long, sampler-space stop ids (stop=exact)
    vocab_stop_set = None  # the pair's stop set (tasks/stop_set.py), set by the run; engine binds

    def with_guards(self, guards: Guards, stop_ids: torch.Tensor | None = None):
        """This rule with `guards` (and the stop ids stop=exact needs; the engine may set
        `stop_ids` later, from the tokenizer); one line when the rule is outside the family."""
        if guards != NO_GUARDS:
            self.check_guardable()
        self.guards = guards
        if stop_ids is not None:
            self.stop_ids = stop_ids
        return self

    def check_guardable(self) -> None:
        if not self.verifies_target:
            raise ValueError(
                f"rule {self.name!r} does not verify against a target pi, so the guards "
                "(stop, strict_first, relax_in, near_top, relax=) do not apply; use a rule of "
                "the target family (sps, cactus, mentored, a cascade, topband, ...)"
            )

    def stop_ids_or_raise(self) -> torch.Tensor:
        if self.stop_ids is None:
            raise ValueError(
                f"rule {self.name!r} has stop=exact but no stop ids: set rule.stop_ids to a "
                "LongTensor of the stop tokens' sampler-space ids (the engine does)"
            )
        return self.stop_ids

    # ---- hooks -------------------------------------------------------------------------------
    def params(self) -> dict:
        """Hyper-parameters that identify this rule (for results rows)."""
        return {}

    def accept_prob(self, stats: DraftStats) -> torch.Tensor:
        """[B, m] acceptance probability of each drafted token, in [0, 1]."""
        raise NotImplementedError

    def accept_prob_and_reuse(self, stats: DraftStats):
        """(accept_prob [B, m], a [B, m] tensor or None): what the recovery at the rejected
        position may reuse instead of recomputing it (TargetRule: h(n), whose exact root is
        the costly part), handed to `recovery_weights` as its last argument."""
        return self.accept_prob(stats), None

    def guarded_accept(self, stats: DraftStats, relax, accept, reuse):
        """(accept, reuse) [B, m] with SpS's test where `relax` or near_top say so; the target
        family implements it (target_rules.py)."""
        raise NotImplementedError(f"{type(self).__name__} takes no guards")

    def recovery_weights(
        self,
        p_row: torch.Tensor,
        q_row: torch.Tensor,
        n: torch.Tensor,
        q_n: torch.Tensor,
        p_n: torch.Tensor,
    ) -> torch.Tensor:
        """[R, V] non-negative weights of the recovery distribution at a rejected position.

        p_row, q_row: [R, V] row-normalised float32; n, q_n, p_n: [R]. A row that sums to zero
        falls back to `fallback_weights`.
        """
        raise NotImplementedError

    def fallback_weights(self, q_row: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """Used when a recovery row has no positive mass (only reachable through rounding)."""
        return q_row

    def acceptance_probability(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Exact P(accept) of one draft n ~ p verified against q, sum_n p(n) a_n, per position.

        p, q: [..., V] rows (normalised here, float64); returns [...] float64. Exact statistics
        live in `exact.py`; each rule implements this and `emitted_law` in closed form."""
        raise NotImplementedError(f"{type(self).__name__} has no exact acceptance probability")

    def emitted_law(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """[..., V] float64: `output_distribution` batched over positions, in O(V log V) each."""
        raise NotImplementedError(f"{type(self).__name__} has no exact emitted law")

    def acceptance_and_law(self, p: torch.Tensor, q: torch.Tensor):
        """([...] beta, [..., V] law) together; a rule that can share their work overrides it."""
        return self.acceptance_probability(p, q), self.emitted_law(p, q)

    # ---- the chain ---------------------------------------------------------------------------
    @torch.no_grad()  # not inference_mode: torch.compile cannot trace through it
    def verify(
        self,
        draft_token_ids: torch.Tensor,  # [B, m]
        draft_probs: torch.Tensor,  # [B, m, V]
        target_probs: torch.Tensor,  # [B, m + 1, V]
        generator: torch.Generator | None = None,
        *,
        uniforms: torch.Tensor | None = None,  # [B, m + 1] float64 in [0, 1)
        check: bool = True,
        support_width: int | None = None,
        relax: torch.Tensor | None = None,  # [B, m] bool: True = the rule, False = SpS
        **unscaled: torch.Tensor,  # unscaled_draft_probs [B, m, V], unscaled_target_probs
    ) -> VerifyOutput:
        """The chain (module doc) on this rule's `decide`. `uniforms[:, j]` replaces the draw of
        position j and `uniforms[:, m]` the last token's, so nothing is drawn from `generator`.
        check=False skips the input checks, the only host reads: with uniforms given the call
        can be captured in a CUDA graph. `support_width` and the unscaled laws are read by the
        plans of `samplers/rules/` (kernel.py); the rules here take them and ignore them.
        `relax` and the guards: `guarded_accept` (target_rules.py), refused outside the family."""
        check_shapes(draft_token_ids, draft_probs, target_probs, uniforms)
        check_unscaled_names(unscaled)
        if relax is not None or self.guards != NO_GUARDS:
            self.check_guardable()  # one line outside the target family, before anything runs
        ids = draft_token_ids.long()
        stats, draft_sums = draft_stats(ids, draft_probs, target_probs, check)
        call = VerifyCall(
            ids, draft_probs, target_probs, stats, draft_sums, check, support_width, relax, unscaled
        )
        return verify_chain(ids, self.decide(call), generator, uniforms)

    def decide(self, call: VerifyCall) -> Decisions:
        """a_j from the [B, m] statistics (`accept_prob_and_reuse`, then the guards); the last
        token's weights from the hooks at each row's position k only (`_last_token`)."""
        accept, reuse = self.accept_prob_and_reuse(call.stats)  # [B, m] each (reuse may be None)
        if call.relax is not None or self.guards != NO_GUARDS:
            accept, reuse = self.guarded_accept(call.stats, call.relax, accept, reuse)
        if call.check and bool(torch.isnan(accept).any()):
            raise ValueError("acceptance probability is NaN: check draft_probs/target_probs")
        last_token = partial(self._last_token, call, reuse)
        return Decisions(accept, last_token, by_threshold=self.deterministic_accept)

    def _last_token(self, call: VerifyCall, reuse, at: Prefix) -> LastToken:
        """The verifier's row k, row-normalised (the bonus), and the recovery weights at the
        rejected position (`recovery_weights`, `fallback_weights` where it has no mass): [B, V]."""
        stats, rows, pos = call.stats, at.rows, at.position
        dtype = stats.q_n.dtype
        q_row = call.target_probs[rows, at.num_accepted].to(dtype)  # [B, V] verifier row at k
        q_row = q_row / stats.target_sums[rows, at.num_accepted].unsqueeze(-1)
        if self.recovery_is_argmax:
            return LastToken(q_row, None, self.bonus_is_argmax)
        p_row = call.draft_probs[rows, pos].to(dtype) / call.draft_sums[rows, pos].unsqueeze(-1)
        n, q_n, p_n = call.ids[rows, pos], stats.q_n[rows, pos], stats.p_n[rows, pos]
        reused = () if reuse is None else (reuse[rows, pos],)
        recovery = self.recovery_weights(p_row, q_row, n, q_n, p_n, *reused).clamp(min=0)
        empty = recovery.sum(dim=-1, keepdim=True) <= 0
        recovery = torch.where(empty, self.fallback_weights(q_row, n), recovery)
        return LastToken(q_row, recovery, self.bonus_is_argmax)

    # ---- exact law for one drafted token -------------------------------------------------------
    @torch.inference_mode()
    def output_distribution(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Exact law of the emitted token when one n ~ p is drafted and verified against q.

        p, q: [V]. Returns [V] float64: sum_n p(n) [1{x = n} a_n + (1 - a_n) r_n(x)].
        Each candidate n becomes one batch row of the same hooks that `verify` uses.
        """
        if p.dim() != 1 or q.dim() != 1 or p.shape != q.shape:
            raise ValueError(
                f"p and q must be 1-D of equal size; got {tuple(p.shape)} and {tuple(q.shape)}"
            )
        vocab = p.shape[0]
        p, q = p.double(), q.double()
        p64 = p / p.sum()
        ids = torch.arange(vocab, device=p.device).unsqueeze(1)  # [V, 1]: row n drafts n
        draft_probs = p.expand(vocab, 1, vocab)  # [V, 1, V]
        target_probs = q.expand(vocab, 2, vocab)  # [V, 2, V] (bonus row unused)
        stats, draft_sums = draft_stats(ids, draft_probs, target_probs)
        accept = self.accept_prob(stats)[:, 0].double()  # [V] a_n
        if self.deterministic_accept:
            accept = (accept >= 0.5).double()
        q_row = (q / stats.target_sums[0, 0]).expand(vocab, vocab)
        p_row = (p / draft_sums[0, 0]).expand(vocab, vocab)
        n = ids[:, 0]
        if self.recovery_is_argmax:
            recovery = torch.nn.functional.one_hot(q_row.argmax(-1), vocab).double()
        else:
            recovery = self.recovery_weights(p_row, q_row, n, stats.q_n[:, 0], stats.p_n[:, 0])
            recovery = recovery.clamp(min=0).double()
            empty = recovery.sum(-1, keepdim=True) <= 0
            recovery = torch.where(empty, self.fallback_weights(q_row, n).double(), recovery)
            recovery = recovery / recovery.sum(-1, keepdim=True)
        law = (p64 * (1 - accept)) @ recovery  # [V]
        law = law + p64 * accept
        return law
