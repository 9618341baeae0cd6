"""GPU memory for the vLLM engines of a run, worked out from the pair's sizes and the card.

vLLM gives each engine `gpu_memory_utilization` x the card's memory (per GPU), and refuses to
start when that is more than is free; a run with baseline=interleave holds two engines in one
process (speculative: verifier + drafter; baseline: the verifier alone). What an engine needs,
per GPU, with tensor parallelism over `tp` GPUs and up to `batch` requests at a time:

    weights      params x bytes / tp            (the drafter shards like the verifier)
    KV cache     batch x max_model_len x kv_bytes_per_token / tp, for each model of the
                 engine (every request may hold a full sequence without preemption)
    fixed        ENGINE_OVERHEAD_GIB: CUDA context, the activations of vLLM's profiling run
                 and CUDA graphs (an allowance, not a measurement), plus the sampler's warm-up:
                 vLLM runs its own sampler once at start on dummy logits of batch x (m + 1)
                 rows of the full vocabulary, with temporaries (probabilities, top-k / top-p
                 sort values and int64 indices): SAMPLER_BYTES_PER_LOGIT per logit; the
                 vocabulary is not sharded there
    the rule     (speculative engine) what vLLM's start-up profile does not see: vLLM 0.34
                 (runner V2) never runs the rejection sampler at start, so the bridge's first
                 real step would be the first to allocate. Reserved here from bytes per logit
                 measured on the CPU (tests/test_vllm_memory.py):
                 - the bridge: a step's rows, batch x (m + 1) x V, at the rule's
                   BRIDGE_BYTES_PER_LOGIT, but never above the working-set cap (default 1 GiB):
                   it verifies in chunks of requests under it (cactus_bench.vllm.working_set);
                 - the drafter's processed law (runner V2, v2_law.py): a full-vocabulary sort
                   of batch rows per draft step inside the captured draft graphs,
                   DRAFT_LAW_BYTES_PER_LOGIT per logit of the graph pool's largest batch
                 On runner V1 (<= 0.33) the profile runs the patched sampler once; counting it
                 again here errs on the safe side.

`plan_memory` splits the run's share of the card (`backend.gpu_memory_utilization`, 0.85) over
the engines in proportion to their needs, or raises one line before anything loads when the
engines do not fit with FIT_MARGIN of the share to spare (the allowances are estimates).
batch defaults to 1: the runner decodes one request at a time (engines.VllmOptions);
a batched run passes its own. docs/gpu.md works the arithmetic out for the paper's pairs and
names the numbers a first GPU run must confirm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GIB = 1 << 30
ENGINE_OVERHEAD_GIB = 2.0
# float32 logits, probabilities and one more float32 copy (top-p's sorted values), and the sort's
# int64 indices: 4 + 4 + 4 + 8 bytes, rounded up for the rejection sampler's extra rows
SAMPLER_BYTES_PER_LOGIT = 24
# Peak bytes the bridge allocates per logit of a step's rows ([B (m + 1), V]), measured on the
# CPU through the V2 bridge (whose chunks gather their rows). A step of B requests holds
# B V (a (m + 1) + b m) bytes: per-row laws a, the rule's plans b per draft slot; the constant
# is the largest per-logit value over m >= 1, max(a + b / 2, a + b), rounded up to 8 bytes. A
# rule not listed takes the default (above the largest). tests/test_vllm_memory.py measures
# every registered rule at m = 1 and 3 and checks each constant (a, b in comments).
BRIDGE_BYTES_PER_LOGIT = {
    "greedy": 24,  # 20 at m = 1
    "tas": 32,  # 26
    **dict.fromkeys(("sps", "cactus", "interp", "topk", "ensemble"), 32),  # 30 at m = 1
    "cactus_exact": 40,  # 32.5 at m = 1
    **dict.fromkeys(("bild", "fly", "fsd_unsmoothed", "lenience"), 64),  # a 12, b 48-49
    **dict.fromkeys(("chow", "diff", "opt"), 72),  # a 12, b 56
    **dict.fromkeys(("fsd", "fsd_reducible", "tokenv1", "tokenv2", "tokenv3"), 80),  # 12, 64
    "mentored": 496,  # a 12, b 479: 16 candidate targets per row (rules/mentored.py)
}
DEFAULT_BRIDGE_BYTES_PER_LOGIT = 512
# v2_law.processed_law_logits: sorted values and their int64 order, the kept mask, probabilities
# and their cumulative sums, measured on the CPU (the same test)
DRAFT_LAW_BYTES_PER_LOGIT = 40  # 32.0 measured, and the rows' own
DEFAULT_BRIDGE_CAP_GIB = 1.0  # backend.bridge_working_set_gib: the bridge's working-set cap
FIT_MARGIN = 0.05  # of the run's share: what the two allowances above may miss
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelSize:
    """What a decoder-only transformer's config says about its memory."""

    params: int
    kv_elements_per_token: int  # K and V, every layer: 2 x layers x kv_heads x head_dim
    max_positions: int | None  # max_position_embeddings
    dtype: str  # the checkpoint's dtype (config torch_dtype / dtype), for dtype="auto"
    vocab: int = 0  # vocab_size: the rows of the sampler's warm-up

    def weight_bytes(self, dtype: str) -> int:
        return self.params * DTYPE_BYTES[self.dtype if dtype == "auto" else dtype]

    def kv_bytes(self, tokens: int, dtype: str) -> int:
        return (
            tokens
            * self.kv_elements_per_token
            * DTYPE_BYTES[self.dtype if dtype == "auto" else dtype]
        )


def model_size(config: Mapping) -> ModelSize:
    """From a config.json mapping (Qwen3, Llama, Gemma-2, SmolLM2 layouts): the parameter count
    of embeddings, attention (q, k, v, o) and gated MLP (3 matrices), within ~1% of the
    checkpoints' (norms and biases are left out)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    head_dim = config.get("head_dim") or hidden // heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    mlp = 3 * hidden * config["intermediate_size"]
    embeddings = config["vocab_size"] * hidden * (1 if config.get("tie_word_embeddings") else 2)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    return ModelSize(
        params=embeddings + layers * (attention + mlp),
        kv_elements_per_token=2 * layers * kv_heads * head_dim,
        max_positions=config.get("max_position_embeddings"),
        dtype=dtype if dtype in DTYPE_BYTES else "bfloat16",
        vocab=int(config["vocab_size"]),
    )


def sampler_warmup_gib(vocab: int, batch: int, draft_tokens: int) -> float:
    """GiB of the sampler's start-up run: batch x (m + 1) rows of the vocabulary."""
    return batch * (draft_tokens + 1) * vocab * SAMPLER_BYTES_PER_LOGIT / GIB


def bridge_bytes_per_logit(rule: str | None) -> int:
    """The rule's measured peak bytes per logit of the bridge's rows (default: the largest)."""
    return BRIDGE_BYTES_PER_LOGIT.get(rule or "", DEFAULT_BRIDGE_BYTES_PER_LOGIT)


def rule_gib(
    vocab: int, batch: int, draft_tokens: int, rule: str | None, cap_gib: float
) -> tuple[float, float]:
    """(the bridge's working set, the drafter law's) in GiB for one speculative engine: the
    bridge's rows capped at `cap_gib`, but never under one request's rows (its smallest chunk)."""
    per_request = (draft_tokens + 1) * vocab * bridge_bytes_per_logit(rule)
    bridge = min(batch * per_request, max(per_request, cap_gib * GIB))
    return bridge / GIB, batch * vocab * DRAFT_LAW_BYTES_PER_LOGIT / GIB


def engine_parts_gib(
    models: list[ModelSize],
    *,
    dtype: str,
    max_model_len: int,
    tp: int,
    batch: int = 1,
    draft_tokens: int = 0,
    rule: str | None = None,
    cap_gib: float = DEFAULT_BRIDGE_CAP_GIB,
) -> dict[str, float]:
    """GiB per GPU one engine needs, by part (module docstring); models[0] is the verifier, a
    drafter (models[1]) makes it speculative, with the rule's working sets."""
    weights = sum(model.weight_bytes(dtype) for model in models)
    kv = sum(model.kv_bytes(batch * max_model_len, dtype) for model in models)
    parts = {
        "weights": weights / tp / GIB,
        "KV cache": kv / tp / GIB,
        "overhead and sampler warm-up": ENGINE_OVERHEAD_GIB
        + sampler_warmup_gib(models[0].vocab, batch, draft_tokens),
    }
    if len(models) > 1:
        parts["rule"] = sum(rule_gib(models[0].vocab, batch, draft_tokens, rule, cap_gib))
    return parts


def engine_need_gib(models: list[ModelSize], **sizes) -> float:
    """GiB per GPU one engine needs: the sum of `engine_parts_gib`."""
    return sum(engine_parts_gib(models, **sizes).values())


@dataclass(frozen=True)
class MemoryPlan:
    """Each engine's need (GiB per GPU) and the gpu_memory_utilization it is given."""

    card_gib: float
    needs_gib: dict[str, float]
    utilization: dict[str, float]


def plan_memory(
    verifier: ModelSize,
    drafter: ModelSize | None,
    *,
    engines: tuple[str, ...],  # "speculative" and / or "baseline"
    dtype: str,
    max_model_len: int,
    tp: int,
    card_bytes: int,
    share: float,  # the run's share of each card, all engines together
    batch: int = 1,  # requests an engine decodes at once (the run's batch)
    draft_tokens: int = 0,  # m: the speculative engine verifies m + 1 rows per request
    rule: str | None = None,  # the acceptance rule (None: the largest working set)
    cap_gib: float = DEFAULT_BRIDGE_CAP_GIB,  # the bridge's working-set cap
) -> MemoryPlan:
    """The engines' gpu_memory_utilization, or ValueError (one line) when they cannot fit."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1; got {batch}")
    models = {"speculative": [verifier, *([drafter] if drafter else [])], "baseline": [verifier]}
    rows = {"speculative": draft_tokens, "baseline": 0}
    parts = {
        name: engine_parts_gib(
            models[name],
            dtype=dtype,
            max_model_len=max_model_len,
            tp=tp,
            batch=batch,
            draft_tokens=rows[name],
            rule=rule,
            cap_gib=cap_gib,
        )
        for name in engines
    }
    needs = {name: sum(engine.values()) for name, engine in parts.items()}
    card_gib = card_bytes / GIB
    budget = share * card_gib
    usable = (1 - FIT_MARGIN) * budget
    total = sum(needs.values())
    if total > usable:
        listed = " + ".join(f"{name} {gib:.1f}" for name, gib in needs.items())
        gib, engine, part = max((g, e, p) for e, ps in parts.items() for p, g in ps.items())
        raise ValueError(
            f"the pair needs {total:.1f} GiB per GPU ({listed}; most of it the {engine} "
            f"engine's {part}, {gib:.1f}) at max_model_len {max_model_len}, "
            f"batch {batch} on {tp} GPU(s), but {share:g} of a {card_gib:.0f} GiB "
            f"card less a {FIT_MARGIN:.0%} margin is {usable:.1f}: raise "
            "backend.tensor_parallel_size (and the GPUs the job asks for), lower "
            "backend.max_model_len or the batch, or run the speculative engine "
            "alone (baseline=none)"
        )
    return MemoryPlan(
        card_gib=card_gib,
        needs_gib=needs,
        utilization={name: round(share * need / total, 4) for name, need in needs.items()},
    )
