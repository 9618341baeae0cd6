"""vLLM model runner V2's rejection-sampler layout (vllm >= 0.34) -> one batched rule call.

The V2 half of cactus_bench.vllm.bridge (which holds V1's layout, the layouts' description and
what both share). vLLM 0.34's `rejection_sample` hands the drafter's logits in a
`DraftLogitsCache`. Under 0.34 the draft steps run inside V2's CUDA graphs (the registered
speculator's law, v2_law.py) while this rejection step runs eagerly, between graph replays; it
still reads nothing from the device on the host (`Step.support_reads=False`: full rows, no support
compaction), so the step never stalls V2's asynchronous scheduling, and it verifies in
chunks of requests under the working-set cap (working_set.py). Random numbers come from
vLLM's per-request seed and the request's position through a counter-based hash, so a seeded
request is reproducible with no generator object and no loop over requests.
"""

from __future__ import annotations

import torch

from cactus_bench.samplers import AcceptanceRule
from cactus_bench.vllm.bridge import (
    FIX_OWN_METHOD,
    needs_draft_probs,
    no_draft_probs,
    padded_rows,
    refuse_unknown,
)
from cactus_bench.vllm.padded_rows import PLACEHOLDER_TOKEN_ID, Step
from cactus_bench.vllm.working_set import verify_bounded


# ---- random numbers: vLLM V2's per-request seeds -----------------------------------------------
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


# ---- the layout -------------------------------------------------------------------------------
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
    then its bonus row. No host read (an eager step between V2's graph replays, which a read
    would stall): full rows, no support compaction (padded_rows.Step.support_reads).
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
        raise ValueError(no_draft_probs(rule))
    layout = (target_logits, draft_logits_cache, draft_sampled, cu_num_logits, pos, idx_mapping)
    step, uniforms = v2_step(*layout, temperature, seed, num_speculative_steps)
    out, num_accepted = verify_bounded(rule, step, uniforms)
    return out, (num_accepted + 1).to(torch.int32)


class DraftRows:
    """The drafter's law of V2's rows, softmax(values / T), built only for the rows a chunk
    asks for (working_set.chunk_of): [L, V] float32 at once would sit outside the cap."""

    def __init__(self, values, row, local, scale, vocab: int):
        self.values, self.row, self.local, self.scale = values, row, local, scale  # [L] each
        self.vocab = vocab

    def __getitem__(self, rows: torch.Tensor) -> torch.Tensor:  # [n] -> [n, V] float32
        raw = self.values[self.row[rows], self.local[rows], : self.vocab].float()
        return torch.softmax(raw / self.scale[rows].unsqueeze(-1), dim=-1)


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
        scale = torch.where(greedy, 1.0, temps)[request_of_row]  # [L]
        drafter = DraftRows(values, row, local, scale, vocab)
    step = Step(
        ids=shifted.clamp(min=0).long(),  # an id >= vocab is rejected (verify_step), not clamped
        target=target_logits[:, :vocab],
        target_is_logits=True,
        draft_probs=drafter,
        **padded_rows(starts, count, width, rows),
        greedy=greedy,
        all_greedy=False,  # knowing it would take a host read
        bonus_ids=None,
        bonus_rows=starts + count,
        width=width,
        support_reads=False,
    )
    # one key per request and step: vLLM's request seed and the position of its first row
    return step, SeedUniforms(seed[state], pos[starts])
