"""Draft-verify speculative decoding with any acceptance rule (`generate`: batch size 1;
`generate_batch`: many requests at once, engine/batched.py and batch_steps.py).

One step (paper §2.1): the drafter proposes m tokens n_j ~ p_j from its own KV cache; the
verifier scores the pending token, the m drafts and thereby the bonus position in ONE forward,
giving q_1..q_{m+1}; the acceptance rule emits the accepted prefix plus one recovered (first
rejection) or bonus (all accepted) token; both caches are cropped back to the accepted prefix.

Cache lengths, with L tokens in the sequence before the step and n drafts accepted:
  verifier: L - 1 cached + (pending + m drafts) = L + m  -> crop to L + n; pending = last emitted
  drafter:  L + m - 1 after drafting (d_m is never fed) -> crop to L + min(n, m - 1); its pending
            is the emitted tokens after that (one token, or d_m and the bonus when n = m), so the
            drafter never re-processes the prefix.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.batch_steps import speculative_step
from cactus_bench.engine.commit_stats import OUT_OF_HEAD_C, step_out_of_head
from cactus_bench.engine.decoder import BaseDecoder, DecodeState
from cactus_bench.engine.draws import ACCEPT, DRAFT, LAST
from cactus_bench.engine.runtime import (
    check_token_map,
    crop_cache,
    graphs_apply,
    make_runner,
    output_vocab_size,
    resolve_compile,
)
from cactus_bench.engine.sampling import SamplingParams, process_logits
from cactus_bench.samplers import AcceptanceRule, make_sampler
from cactus_bench.samplers.guards import NO_GUARDS, bind_guards, relax_mask, think_after


class SpeculativeDecoder(BaseDecoder):
    """`generate(prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None)`.

    sampler: an acceptance rule from `cactus_bench.samplers.make_sampler`; with temperature 0
    the decoder verifies with the `greedy` rule instead, so greedy speculative decoding emits
    exactly the greedy autoregressive tokens. token_map (optional, 1-D LongTensor of vocabulary
    ids both models share) restricts p and q to those ids before the rule sees them.

    fast ("auto" | "on" | "off"): the static-cache compact forward (`fast_runner.FastRunner`)
    instead of HF's eager forward; compile ("auto" | "on" | "off"): torch.compile of it. Both are
    resolved from the verifier and applied to both models; "auto" is explained in `runtime`.
    """

    def __init__(
        self,
        drafter: torch.nn.Module,
        verifier: torch.nn.Module,
        tokenizer,
        sampler: AcceptanceRule,
        num_draft_tokens: int,
        sampling: SamplingParams | None = None,
        eos_token_ids: list[int] | None = None,
        device: str | torch.device = "cpu",
        token_map: torch.Tensor | None = None,
        fast: str = "auto",
        compile: str = "auto",
        cuda_graphs: str = "auto",
        out_of_head_c: float = OUT_OF_HEAD_C,
    ):
        super().__init__(tokenizer, sampling, eos_token_ids, device, eos_model=verifier)
        if not callable(getattr(sampler, "verify", None)):
            raise ValueError("sampler must be an acceptance rule, e.g. make_sampler('sps')")
        if (
            isinstance(num_draft_tokens, bool)
            or not isinstance(num_draft_tokens, int)
            or (num_draft_tokens < 1)
        ):
            raise ValueError(f"num_draft_tokens must be an integer >= 1; got {num_draft_tokens}")
        self.sampler = sampler
        self.greedy_sampler = make_sampler("greedy")
        self.num_draft_tokens = num_draft_tokens
        self.out_of_head_c = out_of_head_c  # commit_stats.py: q(x) < c max q is out of head
        self.cuda_graphs = graphs_apply(verifier, fast, cuda_graphs, self.device)
        compiled = not self.cuda_graphs and resolve_compile(verifier, fast, compile)
        # Sizes the steps use: the drafter reads 1 token (2 after an all-accepted step), the
        # verifier m + 1 (fewer drafts near the token budget are padded up to it) or 1 (bonus).
        self.drafter = make_runner(drafter, self.device, fast, compiled, sizes=(1, 2))
        self.verifier = make_runner(
            verifier, self.device, fast, compiled, sizes=(1, num_draft_tokens + 1)
        )
        self.token_map, self.token_list = check_token_map(token_map, self.device, drafter, verifier)
        # The guards' ids in sampler space (stop=exact's stop ids, relax_in=think's markers)
        self.think_ids = bind_guards(sampler, self.eos_token_ids, self.token_map, self.device)
        sizes = (output_vocab_size(drafter), output_vocab_size(verifier))
        if token_map is None and None not in sizes and sizes[0] != sizes[1]:
            raise ValueError(
                f"drafter has {sizes[0]} output logits and verifier {sizes[1]}: pass "
                f"token_map=torch.arange({min(sizes)}) (or the ids both tokenizers share)"
            )

    def runners(self) -> list:
        return [self.drafter, self.verifier]

    def _named_runners(self) -> dict:
        return {"drafter": self.drafter, "verifier": self.verifier}

    batch_step = speculative_step

    def graph_sizes(self) -> dict[str, list[tuple[int, bool]]]:
        # The drafter's first forward of a step reads 1 or 2 tokens, the others 1; the verifier
        # reads pending + drafts, padded to m + 1 (batch_steps.py).
        return {
            "drafter": [(1, False), (2, False)],
            "verifier": [(self.num_draft_tokens + 1, True)],
        }

    def sampler_name_for(self, params: SamplingParams) -> str:
        rule = self.greedy_sampler if params.is_greedy else self.sampler
        return getattr(rule, "name", type(rule).__name__)

    def _start(self, state: DecodeState, prompt_ids: list[int]) -> None:
        last = torch.tensor([prompt_ids[-1:]], device=self.device)  # [1, 1]
        for name, runner in (("drafter", self.drafter), ("verifier", self.verifier)):
            state.caches[name] = runner.prefilled_cache(prompt_ids[:-1], capacity=state.capacity)
            state.pending[name] = last
        if getattr(self.sampler, "guards", NO_GUARDS).per_position:  # the mask's state
            inside = self.think_ids is not None and self.think_ids.inside_after(prompt_ids)
            zero = torch.zeros(1, dtype=torch.long, device=self.device)
            state.guards = (zero, torch.tensor([inside], device=self.device))

    def _step(self, state: DecodeState, remaining: int) -> list[int]:
        # Never emit more than `remaining`: a step emits at most m + 1 tokens.
        num_drafts = min(self.num_draft_tokens, remaining - 1)
        if num_drafts == 0:
            return self._bonus_step(state)
        clock, record, params = state.clock, state.record, state.params
        greedy = params.is_greedy
        rule = self.greedy_sampler if greedy else self.sampler
        drafter_cache, verifier_cache = state.caches["drafter"], state.caches["verifier"]

        start = clock()
        draft_ids = torch.empty((1, num_drafts), dtype=torch.long, device=self.device)  # [1, m]
        draft_probs = None  # [1, m, V], allocated once V is known
        # Rules whose test reads the temperature-1 untruncated laws (speculative cascades, FSD,
        # BiLD: samplers/rules/) get them too; every other rule sees p and q only.
        unscaled = {} if getattr(rule, "reads_unscaled", False) else None
        next_input = state.pending["drafter"]  # [1, 1] or [1, 2] vocabulary ids
        for j in range(num_drafts):
            logits = self._restrict(
                self.drafter.forward(next_input, drafter_cache, all_logits=False)[:, -1]
            )
            probs = process_logits(logits, params)  # [1, V] the drafter's p_j
            if draft_probs is None:
                draft_probs = probs.new_empty((1, num_drafts, probs.shape[-1]))
                if unscaled is not None:
                    unscaled["unscaled_draft_probs"] = torch.empty_like(draft_probs)
            draft_probs[:, j] = probs
            if unscaled is not None:
                unscaled["unscaled_draft_probs"][:, j] = logits.float().softmax(-1)
            token = state.draw(probs, DRAFT, j, greedy)  # [1, 1] n_j ~ p_j
            draft_ids[:, j : j + 1] = token
            next_input = self._to_vocab(token)
        drafted = clock()

        verify_input = torch.cat([state.pending["verifier"], self._to_vocab(draft_ids)], dim=1)
        logits = self._restrict(
            self.verifier.forward(verify_input, verifier_cache, all_logits=True)
        )
        target_probs = process_logits(logits, params)  # [1, m + 1, V]: q_1..q_m+1
        if unscaled is not None:
            unscaled["unscaled_target_probs"] = logits.float().softmax(-1)
        if target_probs.shape[-1] != draft_probs.shape[-1]:
            raise ValueError(
                f"drafter gives {draft_probs.shape[-1]} probabilities, verifier "
                f"{target_probs.shape[-1]}: pass a token_map of the ids both models share"
            )
        verified = clock()

        accept_u = state.uniforms(ACCEPT, torch.arange(num_drafts, device=self.device))
        draws = torch.cat([accept_u, state.uniforms(LAST)[:, None]], dim=1)  # [1, m + 1]
        relax = {}
        if state.guards is not None and rule is self.sampler:  # built on the device, no read
            think = (self.think_ids.open, self.think_ids.close) if self.think_ids else ()
            relax["relax"] = relax_mask(*state.guards, draft_ids, rule.guards, *think)
        out = rule.verify(
            draft_ids, draft_probs, target_probs, uniforms=draws, **(unscaled or {}), **relax
        )
        self._advance_guards(state, out.token_ids)
        emitted_row = self._to_vocab(out.token_ids.clamp(min=0))  # [1, m + 1]; tail junk
        # [1] accepted drafts with q(x) < c max q (commit_stats.py), on the device
        off_head = step_out_of_head(target_probs, draft_ids, out.token_ids, self.out_of_head_c)
        # the one sync of the step: the emitted ids (-1 marks the unused tail), then the count
        *row, num_off_head = torch.cat([out.token_ids[0], off_head]).tolist()
        num_accepted = sum(1 for token in row if token >= 0) - 1
        emitted = row[: num_accepted + 1]
        if self.token_list is not None:
            emitted = [self.token_list[token] for token in emitted]
        sampled = clock()

        # Roll back to the accepted prefix (see the module docstring for the lengths).
        seq_len = state.seq_len
        crop_cache(verifier_cache, seq_len + num_accepted)
        drafter_kept = min(num_accepted, num_drafts - 1)
        crop_cache(drafter_cache, seq_len + drafter_kept)
        state.pending["verifier"] = emitted_row[:, num_accepted : num_accepted + 1]
        state.pending["drafter"] = emitted_row[:, drafter_kept : num_accepted + 1]
        state.seq_len = seq_len + num_accepted + 1

        record.draft_time_s += drafted - start
        record.verify_time_s += verified - drafted
        record.sampler_time_s += sampled - verified
        record.drafted_per_step.append(num_drafts)
        record.accepted_per_step.append(num_accepted)
        record.emitted_per_step.append(num_accepted + 1)
        record.out_of_head_per_step.append(num_off_head)
        return emitted

    def _bonus_step(self, state: DecodeState) -> list[int]:
        """One token left: no drafts; the verifier's token is the bonus, drawn from q."""
        clock, record, params = state.clock, state.record, state.params
        start = clock()
        logits = self.verifier.forward(state.pending["verifier"], state.caches["verifier"], False)
        probs = process_logits(self._restrict(logits[:, -1]), params)  # [1, V]
        verified = clock()
        bonus_is_argmax = getattr(self.sampler, "bonus_is_argmax", False)
        index = state.draw(probs, LAST, 0, greedy=params.is_greedy or bonus_is_argmax)
        self._advance_guards(state, index)
        token = self._to_vocab(index)  # [1, 1]
        token_id = int(token.item())
        record.verify_time_s += verified - start
        record.sampler_time_s += clock() - verified
        state.pending["verifier"] = token
        state.pending["drafter"] = torch.cat([state.pending["drafter"], token], dim=1)
        state.seq_len += 1
        record.drafted_per_step.append(0)
        record.accepted_per_step.append(0)
        record.emitted_per_step.append(1)
        record.out_of_head_per_step.append(0)
        return [token_id]

    def _advance_guards(self, state: DecodeState, emitted: torch.Tensor) -> None:
        """The guard state after this step's emitted tokens ([1, k] sampler space, -1 unused),
        on the device: the answer offset grows by the tokens, the think state follows them."""
        if state.guards is None:
            return
        offset, inside = state.guards
        valid = emitted >= 0
        if self.think_ids is not None:
            inside = think_after(inside, emitted, valid, self.think_ids.open, self.think_ids.close)
        state.guards = (offset + valid.sum(-1), inside)

    def _restrict(self, logits: torch.Tensor) -> torch.Tensor:
        """[..., V_model] -> [..., K] logits of the shared ids (identity without token_map)."""
        return logits if self.token_map is None else logits.index_select(-1, self.token_map)

    def _to_vocab(self, index: torch.Tensor) -> torch.Tensor:
        """Sampler-space indices -> vocabulary ids the models read."""
        return index if self.token_map is None else self.token_map[index]
