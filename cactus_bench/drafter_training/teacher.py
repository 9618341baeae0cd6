"""Phase 1 of drafter training: the verifier answers training prompts, its top-k logits cached.

On-policy text (the verifier's own answers, sampled at the demo settings T 0.6, top-p 0.95,
top-k 20) is what maximises acceptance. Prompts are answered in left-padded batches with a KV
cache; a row that reached EOS leaves the batch (its cache rows are dropped), so the long tail of
a batch does not pay for finished rows. At every generated position the ``keep`` largest raw
logits and their ids are stored (fp16 / int32) in shards of one batch each under
``<run_dir>/shards``; a stopped run resumes at the first missing shard, and every shard is
sampled from its own seeded generator, so a resumed run writes what an uninterrupted one would.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache


@dataclass(frozen=True)
class TeacherSettings:
    max_new_tokens: int = 256
    keep: int = 64  # raw logits kept per position (T 0.6 leaves ~no mass beyond the top 64)
    temperature: float = 0.6
    top_k: int = 20
    top_p: float = 0.95
    batch_size: int = 64
    sort_window: int = 8  # batches whose prompts are sorted by length together (less padding)
    # Longer prompts (GSM8K with 2-3 solved examples) are skipped: a batch of them costs ~7x a
    # usual one (64 prefills of up to 1000 tokens, then attention over them at every step).
    max_prompt_tokens: int = 320
    seed: int = 0


def warp(top_logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Sorted top logits [..., k] -> probabilities [..., k] after temperature, top-k, top-p."""
    logits = top_logits[..., :top_k].float() / temperature
    probs = torch.softmax(logits, dim=-1)
    # Keep the smallest prefix with mass >= top_p (the first token is always kept).
    before = probs.cumsum(-1) - probs
    probs = torch.where(before < top_p, probs, torch.zeros_like(probs))
    probs = probs / probs.sum(-1, keepdim=True)
    out = torch.zeros_like(top_logits, dtype=torch.float32)
    out[..., :top_k] = probs
    return out


def chat_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as one user turn with the generation prompt (chat template)."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def generate_batch(
    verifier, encoded: list[list[int]], eos: int, settings: TeacherSettings, gen: torch.Generator
) -> list[dict]:
    """Sample answers to the prompts ``encoded`` and keep the teacher's top-k at every step."""
    batch, width = len(encoded), max(len(e) for e in encoded)
    input_ids = torch.full((batch, width), eos, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = verifier(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                   cache=cache, use_cache=True, logits_to_keep=1)  # fmt: skip
    generated: list[list[int]] = [[] for _ in range(batch)]
    top_vals: list[list[torch.Tensor]] = [[] for _ in range(batch)]
    top_idx: list[list[torch.Tensor]] = [[] for _ in range(batch)]
    active = torch.arange(batch)  # original row of each row still in the batch
    next_pos = positions[:, -1] + 1
    for _ in range(settings.max_new_tokens):
        vals, idx = out.logits[:, -1].float().topk(settings.keep, dim=-1)  # [A, keep] sorted
        probs = warp(vals, settings.temperature, settings.top_k, settings.top_p)
        choice = torch.multinomial(probs, 1, generator=gen)  # [A, 1]
        token = idx.gather(-1, choice).squeeze(-1)  # [A]
        vals16, idx32 = vals.half(), idx.int()
        for a, row in enumerate(active.tolist()):
            top_vals[row].append(vals16[a])
            top_idx[row].append(idx32[a])
            generated[row].append(int(token[a]))
        running = token != eos
        if not bool(running.any()):
            break
        if not bool(running.all()):  # finished rows leave the batch and its cache
            keep_rows = running.nonzero().squeeze(-1)
            cache.batch_select_indices(keep_rows)
            active, token = active[keep_rows], token[keep_rows]
            mask, next_pos = mask[keep_rows], next_pos[keep_rows]
        mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], dim=1)
        out = verifier(input_ids=token[:, None], attention_mask=mask,
                       position_ids=next_pos[:, None], cache=cache, use_cache=True)  # fmt: skip
        next_pos = next_pos + 1
    # Target t of a record is the teacher's distribution for generated token t, predicted from
    # the prompt and generated[:t]; the sequence is prompt + generated.
    return [
        {
            "ids": torch.tensor(encoded[row] + generated[row], dtype=torch.int32),
            "prompt_len": len(encoded[row]),
            "top_vals": torch.stack(top_vals[row]),  # [G, keep] fp16 raw logits
            "top_idx": torch.stack(top_idx[row]),  # [G, keep] int32
        }
        for row in range(batch)
    ]


def plan_batches(
    tokenizer, prompts: list[tuple[str, str]], settings: TeacherSettings
) -> list[list[int]]:
    """Prompt indices per shard: windows of ``sort_window`` batches, sorted by prompt length;
    prompts over ``max_prompt_tokens`` tokens are left out."""
    size, window = settings.batch_size, settings.batch_size * settings.sort_window
    lengths = [len(chat_ids(tokenizer, text)) for _, text in prompts]
    batches = []
    for start in range(0, len(prompts), window):
        order = sorted(range(start, min(start + window, len(prompts))), key=lengths.__getitem__)
        order = [i for i in order if lengths[i] <= settings.max_prompt_tokens]
        batches.extend(order[i : i + size] for i in range(0, len(order), size))
    return batches


def shard_path(run_dir: Path, index: int) -> Path:
    return run_dir / "shards" / f"shard_{index:05d}.pt"


def generate_shards(
    verifier,
    tokenizer,
    prompts: list[tuple[str, str]],
    run_dir: Path,
    settings: TeacherSettings,
    target_tokens: int,
    minutes: float,
    log,
) -> None:
    """Write shards until ``target_tokens`` teacher tokens exist or ``minutes`` have passed."""
    (run_dir / "shards").mkdir(parents=True, exist_ok=True)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    batches = plan_batches(tokenizer, prompts, settings)
    done = [torch.load(p) for p in sorted((run_dir / "shards").glob("shard_*.pt"))]
    total = sum(s["num_tokens"] for s in done)
    log(f"teacher: {len(batches)} batches planned, {len(done)} shards / {total} tokens cached")
    deadline = time.time() + minutes * 60
    progress = tqdm(total=target_tokens, initial=min(total, target_tokens), desc="teacher tokens")
    for index, rows in enumerate(batches):
        path = shard_path(run_dir, index)
        if path.exists():
            continue
        if total >= target_tokens or time.time() > deadline:
            break
        wall, cpu = time.time(), time.process_time()
        gen = torch.Generator().manual_seed(settings.seed * 1_000_003 + index)
        records = generate_batch(
            verifier, [chat_ids(tokenizer, prompts[i][1]) for i in rows], eos, settings, gen
        )
        for i, record in zip(rows, records, strict=True):
            record.update(index=i, source=prompts[i][0])
        num_tokens = sum(len(r["top_idx"]) for r in records)
        wall, cpu = time.time() - wall, time.process_time() - cpu
        shard = {"records": records, "num_tokens": num_tokens, "wall_s": wall, "cpu_s": cpu}
        torch.save(shard, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        total += num_tokens
        progress.update(num_tokens)
        log(f"teacher shard {index}: {num_tokens} tok in {wall:.0f} s wall / {cpu:.0f} s cpu "
            f"({num_tokens / wall:.0f} tok/s), total {total}")  # fmt: skip
    progress.close()


def load_shards(run_dir: Path) -> tuple[list[dict], dict[str, float]]:
    """All cached records and the teacher phase's totals (tokens, wall and cpu seconds)."""
    records, totals = [], {"tokens": 0, "wall_s": 0.0, "cpu_s": 0.0, "shards": 0}
    for path in sorted((run_dir / "shards").glob("shard_*.pt")):
        shard = torch.load(path)
        records.extend(shard["records"])
        totals["tokens"] += shard["num_tokens"]
        totals["wall_s"] += shard.get("wall_s", 0.0)
        totals["cpu_s"] += shard.get("cpu_s", 0.0)
        totals["shards"] += 1
    return records, totals
