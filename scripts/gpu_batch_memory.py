"""The HF engine's memory at batch B for the paper's Qwen3 pairs: what sizes experiment=batch_gpu.

    python scripts/gpu_batch_memory.py   # prints the Markdown table of docs/batch.md

A batched run holds both models' weights and, for B slots, static KV caches of a power-of-two
capacity (engine/static_cache.bucket) at least prompt + max_new_tokens + 2 (m + 1) positions, for
the drafter and the verifier (the verifier-only baseline's caches replace the speculative arm's:
the arms decode one after the other). Sizes from the checkpoints' published configs
(cactus_bench.rehearsal.hub_models) by cactus_bench.vllm.memory's arithmetic, bf16, m = 10 and a
prompt of at most 1,024 tokens; "fits" leaves ENGINE_OVERHEAD_GIB and 10 % of the card free for
activations and the allocator.
"""

from __future__ import annotations

from cactus_bench.engine.static_cache import bucket
from cactus_bench.models.registry import get_pair_spec
from cactus_bench.rehearsal.hub_models import hub_model
from cactus_bench.vllm.memory import ENGINE_OVERHEAD_GIB, GIB, model_size

PAIRS = ("qwen3_8b", "qwen3_14b")
BATCHES = (1, 8, 32, 64)
NEW_TOKENS = (2048, 4096)
PROMPT = 1024
M = 10
CARDS = (("80 GB", 79.6), ("141 GB", 140.4))  # GiB nvidia-smi reports for an H100 and an H200


def batch_need_gib(pair: str, batch: int, new_tokens: int) -> float:
    """GiB a run of `pair` holds at `batch` slots (module docstring)."""
    spec = get_pair_spec(pair)
    sizes = [
        model_size({**hub.config, **hub.real_sizes})
        for hub in map(hub_model, (spec.drafter, spec.verifier))
    ]
    capacity = bucket(PROMPT + new_tokens + 2 * (M + 1))
    weights = sum(size.weight_bytes("bfloat16") for size in sizes)
    caches = batch * sum(size.kv_bytes(capacity, "bfloat16") for size in sizes)
    return (weights + caches) / GIB + ENGINE_OVERHEAD_GIB


def table() -> str:
    head = ["pair", "new tokens", *[f"batch {b}" for b in BATCHES]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for pair in PAIRS:
        for new_tokens in NEW_TOKENS:
            cells = []
            for batch in BATCHES:
                need = batch_need_gib(pair, batch, new_tokens)
                fits = [name for name, gib in CARDS if need <= 0.9 * gib]
                cells.append(f"{need:.0f} GiB ({', '.join(fits) or 'no card'})")
            lines.append(f"| {pair} | {new_tokens:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
