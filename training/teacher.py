"""Phase 1 of drafter training: the verifier answers training prompts, its top-k logits cached.

On-policy text (the verifier's own answers, sampled at the paper's settings, `cactus_bench.paper`)
is what maximises acceptance. Prompts are answered by the engine's batched sampler
(`engine.batch_generate`: left padding, a KV cache, finished rows leave the batch, the engine's
sampling law and draw). At every generated position the ``keep`` largest raw
logits and their ids are stored (fp16 / int32) in shards of one batch each (shards.py: a
stopped run resumes at the first missing shard and writes what an uninterrupted one would).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from cactus_bench.engine.batch_generate import sample_continuations
from cactus_bench.engine.sampling import SamplingParams
from cactus_bench.paper import PAPER
from cactus_bench.tasks.prompt_ids import chat_prompt_ids
from training.shards import write_shards


@dataclass(frozen=True)
class TeacherSettings:
    max_new_tokens: int = 256
    keep: int = 64  # raw logits kept per position (T 0.6 leaves ~no mass beyond the top 64)
    temperature: float = PAPER.temperature
    top_k: int = PAPER.top_k
    top_p: float = PAPER.top_p
    batch_size: int = 64
    sort_window: int = 8  # batches whose prompts are sorted by length together (less padding)
    # Longer prompts (GSM8K with 2-3 solved examples) are skipped: a batch of them costs ~7x a
    # usual one (64 prefills of up to 1000 tokens, then attention over them at every step).
    max_prompt_tokens: int = 320
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.top_k <= self.keep:
            raise ValueError(
                f"keep ({self.keep}) must be >= top_k ({self.top_k}) > 0: the kept logits must "
                "hold every token the processed law can draw"
            )

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_p, self.top_k)


def chat_ids(tokenizer, prompt: str) -> list[int]:
    """Token ids of ``prompt`` as one user turn with the generation prompt, as a run encodes it."""
    return chat_prompt_ids(tokenizer, prompt, {})


def generate_batch(
    verifier, encoded: list[list[int]], eos: int, settings: TeacherSettings, seed: int
) -> list[dict]:
    """Sample answers to the prompts ``encoded`` (one batch, the engine's batched sampler and
    law) and keep the teacher's ``keep`` largest raw logits at every generated position."""
    samples = sample_continuations(
        verifier,
        encoded,
        settings.max_new_tokens,
        settings.sampling,
        eos_token_ids={eos},
        pad_token_id=eos,
        batch_size=len(encoded),
        seed=seed,
        keep_logits=settings.keep,
        show_progress=False,
    )
    # Target t of a record is the teacher's distribution for generated token t, predicted from
    # the prompt and generated[:t]; the sequence is prompt + generated.
    return [
        {
            "ids": torch.tensor(prompt + tokens, dtype=torch.int32),
            "prompt_len": len(prompt),
            "top_vals": values.half(),  # [G, keep] fp16 raw logits, sorted descending
            "top_idx": ids.int(),  # [G, keep] int32
        }
        for prompt, tokens, ids, values in zip(
            encoded, samples.tokens, samples.logit_ids, samples.logit_values, strict=True
        )
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
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    batches = plan_batches(tokenizer, prompts, settings)
    done = [torch.load(p) for p in sorted((run_dir / "shards").glob("shard_*.pt"))]
    cached = sum(s["num_tokens"] for s in done)
    log(f"teacher: {len(batches)} batches planned, {len(done)} shards / {cached} tokens cached")
    deadline = time.time() + minutes * 60

    def answer(texts: list[str], seed: int) -> list[dict]:
        encoded = [chat_ids(tokenizer, text) for text in texts]
        return generate_batch(verifier, encoded, eos, settings, seed=seed)

    progress = tqdm(total=target_tokens, initial=min(cached, target_tokens), desc="teacher tokens")
    for index, shard, total in write_shards(
        run_dir,
        batches,
        prompts,
        list(range(len(batches))),
        answer,
        settings.seed,
        cached,
        enough=lambda tokens: tokens >= target_tokens or time.time() > deadline,
    ):
        num_tokens, wall = shard["num_tokens"], shard["wall_s"]
        progress.update(num_tokens)
        log(
            f"teacher shard {index}: {num_tokens} tok in {wall:.0f} s wall / "
            f"{shard['cpu_s']:.0f} s cpu ({num_tokens / wall:.0f} tok/s), total {total}"
        )
    progress.close()
