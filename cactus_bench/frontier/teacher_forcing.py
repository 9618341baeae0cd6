"""p_t and q_t at every context position: teacher-forced forwards, compacted to their support.

For sequence i (prompt + sampled answer of length T_i) one forward of the drafter over the whole
sequence gives its logits at the T_i answer positions (no decode loop); they are processed with
the engine's `process_logits` (temperature, top-k, top-p) after the token_map restriction the
engine applies, so p_t is exactly the law the engine's drafter samples from. q_t is the law the
verifier sampled token t from (kept by the generation), or, without it, the verifier's
teacher-forced forward processed the same way.

Every statistic of every rule is a function of the union support of p_t and q_t (a rule can only
emit a token one of them gives mass), so rows are gathered onto that support in ascending id
order (argmax ties break as in the full vocabulary) and zero-padded to the widest row of a
chunk: with top_k = 20 a row has at most 40 entries instead of 49,152. Without truncation the
support is the vocabulary and a chunk holds O(chunk x V) numbers, as the chunk size allows.

The rules whose test reads the sources' temperature-1 untruncated laws (the cascades' confidences,
FSD's divergence, BiLD's fallback: `reads_unscaled`) see the whole index space there, so for them
a chunk also carries full rows (`FullRows`): p_t, q_t and the temperature-1 laws p̄_t = softmax of
the drafter's logits, q̄_t = softmax of the verifier's teacher-forced logits (one more verifier
forward per sequence), all [C, V'] after the token map, as the HF engine passes them to `verify`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from cactus_bench.engine import SamplingParams, process_logits
from cactus_bench.frontier.contexts import Contexts

# Numbers per FullRows tensor before a chunk is flushed (4 float32 tensors: 256 MB at most).
FULL_ROW_ELEMENTS = 16_000_000


@dataclass
class FullRows:
    """The chunk's positions on the whole index space V' (float32; rows of p, q as processed)."""

    p: torch.Tensor  # [C, V'] drafter's processed law
    q: torch.Tensor  # [C, V'] verifier's processed law
    p_bar: torch.Tensor  # [C, V'] drafter's temperature-1 law (softmax of its logits)
    q_bar: torch.Tensor  # [C, V'] verifier's temperature-1 law
    stop: torch.Tensor | None = None  # [V'] bool: the stop set S on the index space


@dataclass
class Chunk:
    """Positions of consecutive sequences on their union support (float64, rows normalised)."""

    p: torch.Tensor  # [C, K] drafter law
    q: torch.Tensor  # [C, K] verifier law
    sequence: torch.Tensor  # [C] int64 index of each position's sequence
    offset: int  # index of the chunk's first position among all positions
    full: FullRows | None = None  # the same positions on V', when a rule reads p̄, q̄
    stop: torch.Tensor | None = None  # [C, K] bool: which support entries are in S


def support_index(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[T, V] x 2 -> ([T, K] ids of each row's union support in ascending order, padded with
    any id, and [T, K] bool: which entries are real), K the widest row's support."""
    mask = (p > 0) | (q > 0)
    width = max(int(mask.sum(-1).max()), 1)
    vocab = p.shape[-1]
    values, index = mask.to(torch.float32).topk(width, dim=-1)
    index = torch.where(values > 0, index, torch.full_like(index, vocab)).sort(-1).values
    return index.clamp(max=vocab - 1), index < vocab


def on_support(rows: torch.Tensor, index: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """[T, V] -> [T, K]: rows gathered onto `support_index`'s ids, zero on the padding."""
    return torch.where(valid, rows.gather(-1, index), rows.new_zeros(()))


def compact_support(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[T, V] x 2 -> [T, K] x 2 on the union support of each row, ascending ids, zero-padded."""
    index, valid = support_index(p, q)
    return on_support(p, index, valid), on_support(q, index, valid)


def stop_on_index_space(stop_ids, token_map, width: int, device) -> torch.Tensor:
    """[V'] bool: which entries of the rules' index space are stop tokens (through the token
    map when the pair has one; a stop id beyond it, or beyond the logits, is not emittable)."""
    ids = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    if token_map is not None:
        return torch.isin(token_map.to(device), ids)
    row = torch.zeros(width, dtype=torch.bool, device=device)
    row[ids[ids < width]] = True
    return row


@torch.inference_mode()
def answer_logits(model, prompt: list[int], answer: list[int], token_map) -> torch.Tensor:
    """[T, V'] logits of `model` at each answer position (teacher forcing, one forward).

    V' is the token_map's size (or the vocabulary): the index space the engine's rules see."""
    device = next(model.parameters()).device
    sequence = torch.tensor([prompt + answer[:-1]], dtype=torch.long, device=device)
    # The last len(answer) positions predict the answer tokens: keep only their logits.
    logits = model(input_ids=sequence, use_cache=False, logits_to_keep=len(answer)).logits[0]
    if token_map is not None:
        logits = logits.index_select(-1, token_map.to(device))
    return logits


def answer_laws(model, prompt: list[int], answer: list[int], sampling, token_map) -> torch.Tensor:
    """[T, V'] processed law of `model` at each answer position (the engine's process_logits)."""
    return process_logits(answer_logits(model, prompt, answer, token_map), sampling)


def temperature_one(logits: torch.Tensor) -> torch.Tensor:
    """[T, V'] the source's law: softmax at temperature 1, untruncated (the engine's p̄, q̄)."""
    return logits.float().softmax(-1)


def _kept_law(contexts: Contexts, index: int, vocab: int, device) -> torch.Tensor:
    """[T, V'] the generation's kept q (its top_k entries are the whole law)."""
    ids = contexts.q_ids[index].to(device=device, dtype=torch.long)
    probs = contexts.q_probs[index].to(device=device, dtype=torch.float32)
    return torch.zeros((ids.shape[0], vocab), device=device).scatter_(-1, ids, probs)


def iter_chunks(
    pair,
    contexts: Contexts,
    sampling: SamplingParams,
    chunk_elements: int,
    grid_size: int,
    progress: bool = True,
    unscaled: bool = False,
    stop_ids: tuple[int, ...] | None = None,
) -> Iterator[Chunk]:
    """Teacher-forces the sequences in order and yields chunks of about chunk_elements numbers
    (positions x support width x grid_size, the largest parameter grid evaluated at once).
    unscaled: also carry the full rows and the temperature-1 laws (`FullRows`).
    stop_ids: the stop set S (vocabulary ids, `tasks.stop_set`); each chunk then carries it on
    the support (`Chunk.stop`) and on the full rows (`FullRows.stop`)."""
    pending_p: list[torch.Tensor] = []
    pending_q: list[torch.Tensor] = []
    pending_stop: list[torch.Tensor] = []
    stop_row = None  # [V'] bool: S on the index space, built with the first sequence's laws
    pending_seq: list[int] = []
    pending_full: list[tuple[torch.Tensor, ...]] = []
    offset = 0

    def flush() -> Chunk:
        width = max(t.shape[-1] for t in pending_p)
        p = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in pending_p])
        q = torch.cat([torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in pending_q])
        sequence = torch.cat(
            [
                torch.full((t.shape[0],), s, dtype=torch.long)
                for t, s in zip(pending_p, pending_seq, strict=True)
            ]
        )
        p64, q64 = p.double(), q.double()
        full = None
        if pending_full:
            full = FullRows(*(torch.cat(rows) for rows in zip(*pending_full, strict=True)))
            full.stop = stop_row
        stop = None
        if pending_stop:
            stop = torch.cat(
                [torch.nn.functional.pad(t, (0, width - t.shape[-1])) for t in pending_stop]
            )
        chunk = Chunk(
            p64 / p64.sum(-1, keepdim=True),
            q64 / q64.sum(-1, keepdim=True),
            sequence,
            offset,
            full,
            stop,
        )
        for pending in (pending_p, pending_q, pending_seq, pending_full, pending_stop):
            pending.clear()
        return chunk

    bar = tqdm(range(len(contexts.tokens)), desc="teacher forcing", disable=not progress)
    for index in bar:
        answer = contexts.tokens[index]
        if not answer:
            continue
        prompt = contexts.prompt_ids[index]
        p_logits = answer_logits(pair.drafter, prompt, answer, pair.token_map)
        p = process_logits(p_logits, sampling)
        q_logits = None
        if contexts.q_ids is not None:
            q = _kept_law(contexts, index, p.shape[-1], p.device)
        else:
            q_logits = answer_logits(pair.verifier, prompt, answer, pair.token_map)
            q = process_logits(q_logits, sampling)
        if p.shape != q.shape:
            raise ValueError(
                f"drafter gives {p.shape[-1]} probabilities and verifier {q.shape[-1]}: the pair "
                "needs a token_map of the ids both models share"
            )
        if unscaled:
            if q_logits is None:  # the kept q is processed: the verifier's logits come anew
                q_logits = answer_logits(pair.verifier, prompt, answer, pair.token_map)
            laws = (p, q, temperature_one(p_logits), temperature_one(q_logits))
            pending_full.append(tuple(law.float().cpu() for law in laws))
        if stop_ids is not None and stop_row is None:
            stop_row = stop_on_index_space(stop_ids, pair.token_map, p.shape[-1], p.device)
        ids, valid = support_index(p, q)
        pending_p.append(on_support(p, ids, valid))
        pending_q.append(on_support(q, ids, valid))
        if stop_row is not None:
            pending_stop.append(stop_row[ids] & valid)  # [T, K] S on the support
        pending_seq.append(index)
        rows = sum(t.shape[0] for t in pending_p)
        width = max(t.shape[-1] for t in pending_p)
        full_elements = rows * p.shape[-1] if unscaled else 0  # per FullRows tensor
        if rows * width * grid_size >= chunk_elements or full_elements >= FULL_ROW_ELEMENTS:
            chunk = flush()
            offset += chunk.p.shape[0]
            yield chunk
    if pending_p:
        yield flush()
