"""docs/gpu.md's memory table: the paper's Qwen3 pairs on 40 / 80 / 141 GB cards, by arithmetic.

    python scripts/gpu_memory_table.py   # prints the Markdown table (a test checks the doc has it)

Sizes from the checkpoints' published configs (cactus_bench.rehearsal.hub_models), the
arithmetic of cactus_bench.vllm.memory (the same the vLLM backend runs before loading), bf16,
the paper's max_model_len 16,384, both engines of baseline=interleave in one process, and the
run's default share of each card (backend.gpu_memory_utilization 0.85).
"""

from __future__ import annotations

from cactus_bench.models.registry import get_pair_spec
from cactus_bench.paper import PAPER
from cactus_bench.rehearsal.hub_models import hub_model
from cactus_bench.vllm.memory import GIB, model_size, plan_memory

PAIRS = ("qwen3_8b", "qwen3_14b", "qwen3_32b")
# name, memory nvidia-smi reports (MiB): A100 40GB, A100 / H100 80GB, H200 141GB
CARDS = (("40 GB", 40_960), ("80 GB", 81_559), ("141 GB", 143_771))
SHARE = 0.85  # configs/backend/vllm.yaml gpu_memory_utilization
TP_CHOICES = (1, 2, 4, 8)


def published_size(repo_id: str):
    hub = hub_model(repo_id)
    return model_size({**hub.config, **hub.real_sizes})


def cell(verifier, drafter, card_mib: int, engines: tuple[str, ...]) -> str:
    """'tp 2: 22.9 GiB/GPU; 0.45 + 0.40': the smallest tensor parallelism that fits, the need
    per GPU and each engine's gpu_memory_utilization."""
    for tp in TP_CHOICES:
        try:
            plan = plan_memory(
                verifier,
                drafter,
                engines=engines,
                dtype="bfloat16",
                max_model_len=PAPER.max_model_len,
                tp=tp,
                card_bytes=card_mib * (1 << 20),
                share=SHARE,
            )
        except ValueError:
            continue
        need = sum(plan.needs_gib.values())
        shares = " + ".join(f"{u:.2f}" for u in plan.utilization.values())
        return f"tp {tp}: {need:.1f} GiB/GPU; {shares}"
    return "does not fit"


MODES = {  # the engines a run holds at once
    "both engines": ("speculative", "baseline"),  # baseline=interleave (the default)
    "speculative only": ("speculative",),  # baseline=none, or a cached baseline that hits
}


def table() -> str:
    lines = [
        "| pair (drafter -> verifier) | weights, bf16 | KV at 16,384 | engines | "
        + " | ".join(name for name, _ in CARDS)
        + " |",
        "|---|---|---|---|" + "---|" * len(CARDS),
    ]
    for name in PAIRS:
        spec = get_pair_spec(name)
        verifier, drafter = published_size(spec.verifier), published_size(spec.drafter)
        weights = (verifier.weight_bytes("bfloat16") + drafter.weight_bytes("bfloat16")) / GIB
        kv = (verifier.kv_bytes(PAPER.max_model_len, "bfloat16")) / GIB
        kv_drafter = drafter.kv_bytes(PAPER.max_model_len, "bfloat16") / GIB
        for mode, engines in MODES.items():
            cells = [cell(verifier, drafter, mib, engines) for _, mib in CARDS]
            lines.append(
                f"| {name} ({spec.drafter.split('/')[-1]} -> {spec.verifier.split('/')[-1]}) | "
                f"{verifier.weight_bytes('bfloat16') / GIB:.1f} + "
                f"{drafter.weight_bytes('bfloat16') / GIB:.1f} = {weights:.1f} GiB | "
                f"{kv:.2f} + {kv_drafter:.2f} GiB | {mode} | " + " | ".join(cells) + " |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
