"""Batched sampling from one causal LM (no drafter): many prompts at once, left padding, KV cache.

The speculative engine decodes one request at a time; this generator exists for work that needs
many samples from the verifier itself (the frontier's contexts). It samples with the same
`process_logits` as the engine (temperature, then top-k, then top-p) and, given a token_map,
restricts the law to those ids as the engine does, so its tokens follow exactly the law the
engine's verifier-only baseline samples. A batch of rows shares one cache; a row stops at an
end-of-sequence id (kept in its output) or after max_new_tokens; rows never interact.

    from cactus_bench.engine.batch_generate import sample_continuations
    out = sample_continuations(model, prompts, max_new_tokens=256, sampling=sp,
                               eos_token_ids={2}, pad_token_id=0, batch_size=32, seed=1234,
                               keep_top=20)
    out.tokens[i]                        # the sampled ids of prompt i (EOS included)
    out.top_ids[i], out.top_probs[i]     # [len, keep_top]: the law each token was drawn from

keep_top = k > 0 keeps, per sampled token, the k largest entries of the processed law (in the
token_map's index space when one is given): the whole law whenever top_k <= k, which spares a
second (teacher-forced) forward of the model over the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from cactus_bench.engine.sampling import SamplingParams, process_logits


@dataclass
class Samples:
    """Per prompt: sampled ids, and (keep_top > 0) the kept entries of each step's law."""

    tokens: list[list[int]]
    top_ids: list[torch.Tensor] = field(default_factory=list)  # [len_i, keep_top] int64
    top_probs: list[torch.Tensor] = field(default_factory=list)  # [len_i, keep_top] float32


def _cache_keyword(model: torch.nn.Module) -> str:
    """transformers 5.x names the forward's cache argument `cache`, older `past_key_values`."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _left_pad(prompts: list[list[int]], pad_token_id: int, device) -> tuple[torch.Tensor, ...]:
    """[B, L] ids, attention mask and position ids (0 at each row's first real token)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


@torch.inference_mode()
def _sample_batch(model, prompts, max_new_tokens, sampling, eos, pad_token_id, generator,
                  token_map, keyword, keep_top, progress) -> Samples:  # fmt: skip
    device = next(model.parameters()).device
    ids, mask, positions = _left_pad(prompts, pad_token_id, device)
    # A finished row leaves the batch (cache rows selected away), so the long tail of a batch
    # costs what its remaining rows cost. Measured on SmolLM2 (1 thread, batch 64, 256 tokens):
    # a static cache that keeps every row to the end spent most of its time on finished rows.
    cache = DynamicCache(config=model.config)
    outputs: list[list[int]] = [[] for _ in prompts]
    kept: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in prompts]  # [k] x 2 a step
    rows = list(range(len(prompts)))  # prompt index of each row still in the batch
    eos_ids = torch.tensor(sorted(eos), dtype=torch.long, device=device)
    for _ in range(max_new_tokens):
        logits = model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{keyword: cache},
        ).logits[:, -1]  # [B, V]
        if token_map is not None:
            logits = logits.index_select(-1, token_map)  # [B, K] the shared ids only
        probs = process_logits(logits, sampling)
        if sampling.is_greedy:
            token = probs.argmax(-1)
        else:
            token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # [B]
        if keep_top:
            top = probs.topk(min(keep_top, probs.shape[-1]), dim=-1)
            indices, values = top.indices.cpu(), top.values.cpu()
            for row, prompt in enumerate(rows):
                kept[prompt].append((indices[row], values[row]))
        if token_map is not None:
            token = token_map[token]
        for prompt, value in zip(rows, token.tolist(), strict=True):
            outputs[prompt].append(value)
        if progress is not None:
            progress.update(len(rows))
        finished = torch.isin(token, eos_ids)
        if bool(finished.all()):
            break
        ids, mask, positions = token.unsqueeze(-1), mask, positions[:, -1:] + 1
        mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
        if bool(finished.any()):
            active = (~finished).nonzero().squeeze(-1)
            cache.batch_select_indices(active)
            ids, mask, positions = ids[active], mask[active], positions[active]
            rows = [rows[i] for i in active.tolist()]
    samples = Samples(outputs)
    if keep_top:
        for steps in kept:
            samples.top_ids.append(torch.stack([i for i, _ in steps]))
            samples.top_probs.append(torch.stack([v for _, v in steps]))
    return samples


def sample_continuations(
    model: torch.nn.Module,
    prompts: Iterable[list[int]],
    max_new_tokens: int,
    sampling: SamplingParams,
    eos_token_ids: Iterable[int],
    pad_token_id: int,
    batch_size: int = 32,
    seed: int = 0,
    token_map: torch.Tensor | None = None,
    keep_top: int = 0,
    show_progress: bool = True,
) -> Samples:
    """One sampled continuation per prompt (prompt order), each ending at EOS or the budget.

    Prompts are grouped by length (less padding) into batches of `batch_size`; batch i samples
    with a generator seeded by (seed, i), so the same inputs give the same tokens.
    """
    prompts = [list(map(int, p)) for p in prompts]
    if not prompts or any(not p for p in prompts):
        raise ValueError("sample_continuations needs non-empty prompts (lists of token ids)")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1; got {max_new_tokens}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1; got {batch_size}")
    device = next(model.parameters()).device
    if token_map is not None:
        token_map = token_map.to(device=device, dtype=torch.long)
    keyword = _cache_keyword(model)
    order = sorted(range(len(prompts)), key=lambda i: (len(prompts[i]), i))
    results: list[tuple | None] = [None] * len(prompts)
    bar = tqdm(total=None, desc="sampling contexts", unit="tok", disable=not show_progress)
    with bar:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            generator = torch.Generator(device=device).manual_seed(
                (int(seed) * 1_000_003 + start // batch_size) % 2**63
            )
            out = _sample_batch(
                model, [prompts[i] for i in batch], max_new_tokens, sampling,
                set(eos_token_ids), pad_token_id, generator, token_map, keyword, keep_top, bar,
            )  # fmt: skip
            for row, index in enumerate(batch):
                tops = (out.top_ids[row], out.top_probs[row]) if keep_top else (None, None)
                results[index] = (out.tokens[row], *tops)
    samples = Samples([r[0] for r in results])
    if keep_top:
        samples.top_ids = [r[1] for r in results]
        samples.top_probs = [r[2] for r in results]
    return samples
