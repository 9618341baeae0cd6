"""Contexts: the verifier's own answers to a prompt set, sampled once and cached.

Prompts (the demo task's, GSM8K questions) are chat-formatted as lm-eval formats them for the
tasks, then the verifier samples one answer per prompt under the run's sampling, batched
(`engine.batch_generate`). When top_k is set, the law q_t each token was drawn from is kept too
(its top_k entries are the whole law), so the statistics need no second verifier forward; with
top_k = 0 q_t is recomputed by teacher forcing (`teacher_forcing.py`).

The cache (`<cache_dir>/<pair>-<key>.pt`, git-ignored) is keyed by everything that changes the
tokens: verifier id, revision and dtype, device type, the prompts' token ids, sampling, seed,
max_new_tokens, batch size and the token map. The drafter is not in the key: a new drafter reuses
the contexts and only the statistics are recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from cactus_bench.engine import SamplingParams
from cactus_bench.engine.batch_generate import sample_continuations
from cactus_bench.engine.runtime import resolve_eos_ids
from cactus_bench.frontier.conf import FrontierConf, FrontierConfigError
from cactus_bench.tasks.prompt_ids import chat_prompt_ids
from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH

CACHE_VERSION = 2  # bump when the sampled tokens of a given key change (e.g. the generator)
KEEP_TOP_MAX = 256  # keep q from the generation when top_k <= this (else teacher-force it)


@dataclass
class Contexts:
    """prompt_ids[i] + tokens[i] is sequence i; q_ids/q_probs[i]: [len_i, k] kept law or None."""

    prompt_ids: list[list[int]]
    tokens: list[list[int]]
    sources: list[str]  # prompt source of each sequence (demo, gsm8k_train, ...)
    q_ids: list[torch.Tensor] | None = None
    q_probs: list[torch.Tensor] | None = None

    @property
    def num_positions(self) -> int:
        return sum(len(t) for t in self.tokens)


def load_prompt_texts(conf: FrontierConf) -> list[tuple[str, str]]:
    """(source, text) pairs in the order of conf.prompts."""
    texts: list[tuple[str, str]] = []
    for source, size in conf.source_sizes().items():
        if size == 0:
            continue
        if source == "demo":
            with open(DEMO_PROMPTS_PATH) as fh:
                rows = [json.loads(line)["prompt"] for line in fh if line.strip()]
        elif source == "ifeval":
            rows = _data_rows(conf.data_dir, "ifeval/input_data.jsonl", "prompt", "IFEval")
        else:
            split = source.removeprefix("gsm8k_")
            rows = _data_rows(conf.data_dir, f"gsm8k/{split}.jsonl", "question", f"GSM8K {split}")
        if len(rows) < size:
            raise FrontierConfigError(
                f"{source} has {len(rows)} prompts but {size} were asked: lower num_demo, "
                "num_gsm8k or num_ifeval"
            )
        texts.extend((source, text) for text in rows[:size])
    return texts


def _data_rows(data_dir: str | None, relative: str, key: str, what: str) -> list[str]:
    folder = data_dir or os.environ.get("CACTUS_BENCH_DATA")
    path = Path(folder).expanduser() / relative if folder else None
    if path is None or not path.is_file():
        where = f"{path} does not exist" if path else "no data folder is set"
        raise FrontierConfigError(
            f"{what} prompts need a data folder ({where}): pass data_dir=/path/like/"
            "shared/data (or set $CACTUS_BENCH_DATA), or use --prompts demo"
        )
    with open(path) as fh:
        return [json.loads(line)[key] for line in fh if line.strip()]


def encode_prompts(texts: list[str], tokenizer, chat_template_kwargs: dict) -> list[list[int]]:
    """Chat-formatted token ids, as a run encodes a task's prompts."""
    return [chat_prompt_ids(tokenizer, text, chat_template_kwargs) for text in texts]


def cache_key(conf: FrontierConf, pair, prompt_ids: list[list[int]], device: torch.device) -> str:
    token_map = None if pair.token_map is None else pair.token_map.tolist()
    identity = {
        "version": CACHE_VERSION,
        "verifier": pair.verifier_id,
        "dtype": str(next(pair.verifier.parameters()).dtype),
        "device": device.type,
        "prompts": prompt_ids,
        "sampling": [conf.temperature, conf.top_p, conf.top_k],
        "seed": conf.seed,
        "max_new_tokens": conf.max_new_tokens,
        "batch_size": conf.batch_size,
        "token_map": token_map,
    }
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:16]


def keep_top(conf: FrontierConf) -> int:
    """Entries of q_t kept from the generation: the whole law when top_k is small, else 0."""
    return conf.top_k if 0 < conf.top_k <= KEEP_TOP_MAX else 0


def build_contexts(conf: FrontierConf, pair, cache_dir: Path, device: torch.device) -> Contexts:
    """The cached contexts for this pair and prompt set, sampling them when absent."""
    sourced = load_prompt_texts(conf)
    prompt_ids = encode_prompts([t for _, t in sourced], pair.tokenizer, pair.chat_template_kwargs)
    sources = [source for source, _ in sourced]
    path = Path(cache_dir) / f"{conf.pair}-{cache_key(conf, pair, prompt_ids, device)}.pt"
    if path.is_file():
        stored = torch.load(path, weights_only=True)
        if conf.progress:
            print(f"contexts: reusing {path}", flush=True)
        return Contexts(
            prompt_ids, stored["tokens"], sources, stored.get("q_ids"), stored.get("q_probs")
        )
    tokenizer = pair.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    sampling = SamplingParams(conf.temperature, conf.top_p, conf.top_k)
    kept = keep_top(conf)
    samples = sample_continuations(
        pair.verifier,
        prompt_ids,
        conf.max_new_tokens,
        sampling,
        eos_token_ids=resolve_eos_ids(tokenizer, pair.verifier, None),
        pad_token_id=pad,
        batch_size=conf.batch_size,
        seed=conf.seed,
        token_map=pair.token_map,
        keep_top=kept,
        show_progress=conf.progress,
    )
    contexts = Contexts(prompt_ids, samples.tokens, sources)
    if kept:
        contexts.q_ids = [ids.to(torch.int32) for ids in samples.top_ids]
        contexts.q_probs = [probs.float() for probs in samples.top_probs]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(
        {"tokens": contexts.tokens, "q_ids": contexts.q_ids, "q_probs": contexts.q_probs}, partial
    )
    partial.replace(path)
    return contexts
