"""Teacher data with features: the verifier answers prompts; its features and laws are cached.

At every position i of prompt + answer the verifier's last hidden state f_i [H] (after the final
norm: what its LM head reads, EAGLE's "feature") is kept in fp16; at every answer position the
verifier's *processed* law q (temperature, top-k, top-p through engine.sampling.process_logits,
the law speculative sampling verifies against) is kept as its top-k ids and probabilities, which
hold all of its mass since top-k is on. Answers are sampled from that same q (on-policy text).

Prompts are answered in left-padded batches with a KV cache; a row that reached EOS leaves the
batch. Each batch is one shard (drafter_training/shards.py: its own seed, so a stopped run resumes
at the first missing shard and writes what an uninterrupted run would; read back by its
`load_shards`). Features are large (~1.2 kB a position): the run directory lives in the ignored
cache (``~/.cache/cactus_bench``), never in the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import DynamicCache

from cactus_bench.drafter_training.shards import shard_path, write_shards
from cactus_bench.drafter_training.teacher import TeacherSettings, chat_ids, plan_batches
from cactus_bench.engine.sampling import (
    PAPER_SAMPLING,
    SamplingParams,
    process_logits,
    sample_token,
)


@dataclass(frozen=True)
class CollectSettings:
    max_new_tokens: int = 256
    batch_size: int = 64
    sort_window: int = 8  # batches whose prompts are sorted by length together
    max_prompt_tokens: int = 320
    seed: int = 0

    def planning(self) -> TeacherSettings:
        """The distilled drafter's batch planner reads these fields (plan_batches)."""
        return TeacherSettings(
            max_new_tokens=self.max_new_tokens,
            batch_size=self.batch_size,
            sort_window=self.sort_window,
            max_prompt_tokens=self.max_prompt_tokens,
            seed=self.seed,
        )


def _verifier_step(verifier, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(features [B, T, H] after the final norm, last-position logits [B, V])."""
    hidden = verifier.model(use_cache=True, **inputs).last_hidden_state
    return hidden, verifier.lm_head(hidden[:, -1])


@torch.no_grad()
def answer_batch(
    verifier,
    encoded: list[list[int]],
    eos: int,
    max_new_tokens: int,
    sampling: SamplingParams,
    gen: torch.Generator,
) -> list[dict]:
    """Sample answers to ``encoded``; keep features at every position and q at answer positions.

    A record's ``features`` [S - 1, H] covers positions 0..S-2 of its sequence ``ids`` [S] (the
    last token is never fed); ``q_idx`` / ``q_prob`` [G, top_k] is the law of answer token t,
    computed at position prompt_len - 1 + t.
    """
    keep = sampling.top_k
    batch, width = len(encoded), max(len(e) for e in encoded)
    input_ids = torch.full((batch, width), eos, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    hidden, logits = _verifier_step(
        verifier,
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        cache=cache,
    )
    features = [[hidden[row, width - len(e) :].half()] for row, e in enumerate(encoded)]
    generated: list[list[int]] = [[] for _ in range(batch)]
    q_idx: list[list[torch.Tensor]] = [[] for _ in range(batch)]
    q_prob: list[list[torch.Tensor]] = [[] for _ in range(batch)]
    active = torch.arange(batch)  # original row of each row still in the batch
    next_pos = positions[:, -1] + 1
    for step in range(max_new_tokens):
        probs = process_logits(logits, sampling)  # [A, V]
        token = sample_token(probs, gen, greedy=False).squeeze(-1)  # [A]
        top_prob, top_idx = probs.topk(keep, dim=-1)  # [A, keep]: all of q's mass
        for a, row in enumerate(active.tolist()):
            q_idx[row].append(top_idx[a].int())
            q_prob[row].append(top_prob[a])
            generated[row].append(int(token[a]))
        running = token != eos
        if step + 1 == max_new_tokens or not bool(running.any()):
            break
        if not bool(running.all()):  # finished rows leave the batch and its cache
            keep_rows = running.nonzero().squeeze(-1)
            cache.batch_select_indices(keep_rows)
            active, token = active[keep_rows], token[keep_rows]
            mask, next_pos = mask[keep_rows], next_pos[keep_rows]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
        hidden, logits = _verifier_step(
            verifier,
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            cache=cache,
        )
        for a, row in enumerate(active.tolist()):
            features[row].append(hidden[a].half())
        next_pos = next_pos + 1
    return [
        {
            "ids": torch.tensor(encoded[row] + generated[row], dtype=torch.int32),
            "prompt_len": len(encoded[row]),
            "features": torch.cat(features[row]),  # [S - 1, H] fp16
            "q_idx": torch.stack(q_idx[row]),  # [G, top_k] int32
            "q_prob": torch.stack(q_prob[row]),  # [G, top_k] float32
        }
        for row in range(batch)
    ]


def collect_shards(
    verifier,
    tokenizer,
    prompts: list[tuple[str, str]],
    run_dir: Path,
    settings: CollectSettings,
    target_tokens: int,
    log,
    sampling: SamplingParams = PAPER_SAMPLING,
    part: int = 0,
    parts: int = 1,
) -> int:
    """Write shards until ``target_tokens`` answer tokens exist; return the number cached.

    With ``parts`` > 1 this process writes only the shards whose index is ``part`` modulo
    ``parts`` (and stops at its share of the target), so that processes on separate cores fill
    one folder without writing the same shard."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    batches = plan_batches(tokenizer, prompts, settings.planning())
    mine = [i for i in range(len(batches)) if i % parts == part]
    cached = [shard_path(run_dir, i) for i in mine if shard_path(run_dir, i).exists()]
    cached_tokens = total = sum(torch.load(path)["num_tokens"] for path in cached)
    log(f"collect: {len(mine)} of {len(batches)} batches, {total} answer tokens cached")

    def answer(texts: list[str], seed: int) -> list[dict]:
        encoded = [chat_ids(tokenizer, text) for text in texts]
        gen = torch.Generator().manual_seed(seed)
        return answer_batch(verifier, encoded, eos, settings.max_new_tokens, sampling, gen)

    for index, shard, total in write_shards(
        run_dir,
        batches,
        prompts,
        mine,
        answer,
        settings.seed,
        cached_tokens,
        enough=lambda tokens: tokens * parts >= target_tokens,
    ):
        log(
            f"collect shard {index}: {shard['num_tokens']} tok in {shard['wall_s']:.0f} s wall / "
            f"{shard['cpu_s']:.0f} s cpu, total {total}"
        )
    return total
