"""Counter-based uniforms: a request's random draws keyed on (seed, position, stream).

Why: a batched step draws for every row at once, on the device, with no Python loop over rows
and no generator object per row, yet a request's tokens must depend only on its own seed, never
on its neighbours, the batch size or the order requests were scheduled in. A stateless hash of
(seed, sequence position, stream) gives exactly that: the uniform that decides row b's draft at
position L + j is the same number at batch 1 and at batch 64, on CPU and CUDA, and a CUDA graph
can compute it (no generator state to advance).

Streams name the draws of a step (a row at sequence length L when its step starts):
    DRAFT   the drafter's token at position L + j         (j = 0..m-1)
    ACCEPT  the acceptance test of the draft at L + j      (u < a_j)
    LAST    the token after the accepted prefix: recovered, bonus, or the verifier-only token
            (one per step, keyed on L: each step of a row starts at a new L)

The hash is murmur3's 32-bit finaliser (`fmix32`) chained over the key's words, in int64
tensors whose every product stays below 2^63 (each 32-bit multiply is done in 16-bit halves),
so the result is exact on every device and backend, compiled or not. Two 32-bit words give a
53-bit float64 uniform in [0, 1), the resolution `sample_categorical` inverts its CDF at.
"""

from __future__ import annotations

import torch

DRAFT, ACCEPT, LAST = 1, 2, 3
_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9  # 2^32 / phi: spreads consecutive stream and position values


def _mul32(values: torch.Tensor, constant: int) -> torch.Tensor:
    """(values * constant) mod 2^32 for values in [0, 2^32), with no int64 overflow."""
    low, high = constant & 0xFFFF, constant >> 16
    return (values * low + (((values * high) & 0xFFFF) << 16)) & _MASK32


def fmix32(values: torch.Tensor) -> torch.Tensor:
    """murmur3's finaliser: a bijection of [0, 2^32) whose output bits each depend on all input
    bits (int64 tensors holding 32-bit values)."""
    values = values ^ (values >> 16)
    values = _mul32(values, 0x85EBCA6B)
    values = values ^ (values >> 13)
    values = _mul32(values, 0xC2B2AE35)
    return values ^ (values >> 16)


def uniforms(
    seeds: torch.Tensor, positions: torch.Tensor, stream: int | torch.Tensor
) -> torch.Tensor:
    """float64 uniforms in [0, 1), one per element of `positions`.

    seeds: [R] int64 (any value a request's seed takes); positions: [R] or [R, k] int64 sequence
    positions (>= 0); stream: DRAFT, ACCEPT or LAST, or an int64 tensor of them broadcast with
    positions ([k]: one per column). Same key, same number, on any device."""
    return keyed_uniforms(request_keys(seeds), positions, stream)


def request_keys(seeds: torch.Tensor) -> torch.Tensor:
    """[R] int64 seeds -> [R] the requests' own 32-bit keys: the part of the hash that depends
    on the seed alone (the batched engine keeps it per slot, computed once a request)."""
    seeds = seeds.to(torch.int64)
    seed_low, seed_high = seeds & _MASK32, (seeds >> 32) & _MASK32
    return fmix32(seed_high ^ fmix32(seed_low ^ _GOLDEN))


def keyed_uniforms(
    keys: torch.Tensor, positions: torch.Tensor, stream: int | torch.Tensor
) -> torch.Tensor:
    """`uniforms` from the requests' keys [R] (`request_keys`) instead of their seeds."""
    key = keys
    while key.dim() < positions.dim():
        key = key.unsqueeze(-1)
    key = fmix32(key ^ _mul32((positions & _MASK32) + 1, _GOLDEN))
    streams = torch.full_like(key, stream) if isinstance(stream, int) else stream.expand_as(key)
    key = fmix32(key ^ _mul32(streams, 0x7FEB352D))
    high = fmix32(key ^ 0x68E31DA4) >> 5  # 27 bits
    low = fmix32(key ^ 0xB5297A4D) >> 6  # 26 bits
    return (high * 67108864 + low).to(torch.float64) / 9007199254740992.0  # / 2^53


def step_uniforms(keys: torch.Tensor, lengths: torch.Tensor, m: int) -> torch.Tensor:
    """[R, 2m + 1] float64: every draw of one speculative step in one call, for rows of keys
    [R] (`request_keys`) at sequence lengths L [R]: columns 0..m-1 DRAFT at L + j, m..2m-1
    ACCEPT at L + j, 2m LAST at L (the numbers `uniforms` gives each key alone, so batch 1 and
    batch B draw the same). One call a step instead of m + 2: the hash is ~140 element-wise ops
    whatever its width (~95 from a key), each an eager launch on a GPU."""
    draft = torch.arange(m, device=lengths.device)  # [m] offsets j
    offsets = torch.cat([draft, draft, draft.new_zeros(1)])  # [2m + 1]
    streams = torch.cat(
        [torch.full_like(draft, DRAFT), torch.full_like(draft, ACCEPT), draft.new_full((1,), LAST)]
    )
    return keyed_uniforms(keys, lengths[:, None] + offsets, streams)
