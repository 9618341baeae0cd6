"""Batched sampling from one causal LM (no drafter): many prompts at once, left padding, KV cache.

The decoders' `generate_batch` (batched.py) runs the engine's requests, each with its own
stops, seed and record; this generator exists for work that needs many plain samples from the
verifier itself (the frontier's contexts, the drafter's teacher). It samples with the same
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
second (teacher-forced) forward of the model over the same tokens. keep_logits = k > 0 keeps
the k largest raw logits instead (before temperature and filters: what drafter distillation
learns from). Tokens are drawn by the engine's `sample_token`, as every decoder draws them.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from cactus_bench.engine.sampling import SamplingParams, process_logits, sample_token


@dataclass
class Samples:
    """Per prompt: sampled ids, and (keep_top > 0) the kept entries of each step's law."""

    tokens: list[list[int]]
    top_ids: list[torch.Tensor] = field(default_factory=list)  # [len_i, keep_top] int64
    top_probs: list[torch.Tensor] = field(default_factory=list)  # [len_i, keep_top] float32
    logit_ids: list[torch.Tensor] = field(default_factory=list)  # [len_i, keep_logits] int64
    logit_values: list[torch.Tensor] = field(default_factory=list)  # [len_i, keep_logits] fp32


def _cache_keyword(model: torch.nn.Module) -> str:
    """transformers 5.x names the forward's cache argument `cache`, older `past_key_values`."""
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


@dataclass(frozen=True)
class _Keep:
    """What a batch keeps per step besides the tokens (0: nothing)."""

    top: int = 0  # entries of the processed law
    logits: int = 0  # raw logits


def _stack_steps(steps: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    """[(ids [k], values [k]) per step] -> (ids [len, k], values [len, k])."""
    return torch.stack([i for i, _ in steps]), torch.stack([v for _, v in steps])


def _draw(probs: torch.Tensor, sampling: SamplingParams, generator) -> torch.Tensor:
    """[B, V] processed laws -> [B] token ids by the engine's `sample_token`. With top-k on,
    the draw runs over the law's k-id support (every other id has probability 0): the same
    law, at a fraction of the cost on a CPU (64 rows of SmolLM2's 49,152 ids at top-k 20, one
    AMD EPYC core: 9 ms against 62 ms for the cumulative sums over the whole vocabulary)."""
    if sampling.is_greedy or not 0 < sampling.top_k < probs.shape[-1]:
        return sample_token(probs, generator, sampling.is_greedy).squeeze(-1)
    support = probs.topk(sampling.top_k, dim=-1)  # [B, k]
    return support.indices.gather(-1, sample_token(support.values, generator, False)).squeeze(-1)


@torch.inference_mode()
def _sample_batch(
    model,
    prompts,
    max_new_tokens,
    sampling,
    eos,
    pad_token_id,
    generator,
    token_map,
    keyword,
    keep: _Keep,
    progress,
) -> Samples:
    device = next(model.parameters()).device
    ids, mask, positions = _left_pad(prompts, pad_token_id, device)
    # A finished row leaves the batch (cache rows selected away), so the long tail of a batch
    # costs what its remaining rows cost. Measured on SmolLM2 (1 thread, batch 64, 256 tokens):
    # a static cache that keeps every row to the end spent most of its time on finished rows.
    cache = DynamicCache(config=model.config)
    outputs: list[list[int]] = [[] for _ in prompts]
    kept: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in prompts]  # [k] x 2 a step
    kept_logits: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in prompts]
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
        token = _draw(probs, sampling, generator)  # [B]
        for count, law, store in ((keep.top, probs, kept), (keep.logits, logits, kept_logits)):
            if count:
                top = law.float().topk(min(count, law.shape[-1]), dim=-1)  # sorted descending
                indices, values = top.indices.cpu(), top.values.cpu()
                for row, prompt in enumerate(rows):
                    store[prompt].append((indices[row], values[row]))
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
    for steps in kept if keep.top else ():
        ids, probs = _stack_steps(steps)
        samples.top_ids.append(ids)
        samples.top_probs.append(probs)
    for steps in kept_logits if keep.logits else ():
        ids, values = _stack_steps(steps)
        samples.logit_ids.append(ids)
        samples.logit_values.append(values)
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
    keep_logits: int = 0,
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
    keep = _Keep(keep_top, keep_logits)
    batches: list[tuple[list[int], Samples]] = []
    bar = tqdm(total=None, desc="sampling contexts", unit="tok", disable=not show_progress)
    with bar:
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            generator = torch.Generator(device=device).manual_seed(
                (int(seed) * 1_000_003 + start // batch_size) % 2**63
            )
            out = _sample_batch(
                model,
                [prompts[i] for i in batch],
                max_new_tokens,
                sampling,
                set(eos_token_ids),
                pad_token_id,
                generator,
                token_map,
                keyword,
                keep,
                bar,
            )
            batches.append((batch, out))
    return _in_prompt_order(batches, len(prompts))


def _in_prompt_order(batches: list[tuple[list[int], Samples]], count: int) -> Samples:
    """The batches' samples (rows in length order) back in prompt order."""
    merged = Samples([[] for _ in range(count)])
    for name in ("top_ids", "top_probs", "logit_ids", "logit_values"):
        if getattr(batches[0][1], name):
            setattr(merged, name, [None] * count)
    for batch, out in batches:
        for row, index in enumerate(batch):
            merged.tokens[index] = out.tokens[row]
            for name in ("top_ids", "top_probs", "logit_ids", "logit_values"):
                if getattr(merged, name):
                    getattr(merged, name)[index] = getattr(out, name)[row]
    return merged
