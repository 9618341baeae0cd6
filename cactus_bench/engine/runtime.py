"""Thin helpers around HF causal LMs: cached forwards, cache roll-back, clocks, argument checks."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Iterable

import torch
from transformers import DynamicCache

from cactus_bench.engine.cuda_graphs import resolve_cuda_graphs
from cactus_bench.engine.fast_runner import FastRunner, StaticKVCache, unsupported_reason

FORWARD_MODES = ("auto", "on", "off")
# compile="auto" compiles on CUDA only, for models from this many parameters up: batch-1 GPU steps
# are launch-bound, which mode="reduce-overhead" (CUDA graphs) targets. On a CPU decode is
# memory-bound, and the compiled layers run ATen's linear layers (inductor cannot trace oneDNN's
# packed weights): for SmolLM2-135M in bf16 they took 62 ms of CPU per token against 49 ms for the
# eager fast forward on the packs (48-token requests, one thread, this project's Intel CPU), after
# a 25-50 s cold compile; `compile="on"` still compiles on CPU. On the tiny test models a compile
# costs ~20 s against ~1 ms per step.
COMPILE_MIN_PARAMS = 20_000_000
# The linear kernel every fast forward a decoder builds asks for ("auto", "onednn" or "aten", see
# `cpu_kernels`). Decoders take no argument for it: "auto" picks the measured best. Benchmarks
# and tests that compare kernels set this module attribute (tests via monkeypatch).
DEFAULT_LINEAR_KERNEL = "auto"
logger = logging.getLogger(__name__)


class ModelRunner:
    """Calls one HF causal LM with a KV cache (transformers 5.x keyword `cache`, older
    `past_key_values`), asking for the last position's logits only where that is all we need."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model.eval()
        self.device = device
        check_model_device(model, device)
        params = inspect.signature(model.forward).parameters
        self.cache_keyword = (
            "past_key_values"
            if "cache" not in params and ("past_key_values" in params)
            else "cache"
        )
        self.has_logits_to_keep = "logits_to_keep" in params

    def new_cache(self) -> DynamicCache:
        config = getattr(self.model, "config", None)
        return DynamicCache(config=config) if config is not None else DynamicCache()

    def forward(self, input_ids: torch.Tensor, cache: DynamicCache, all_logits: bool):
        """input_ids [1, n] -> logits [1, n, V] (all_logits) or [1, 1, V] (last position)."""
        kwargs = {self.cache_keyword: cache, "use_cache": True}
        if self.has_logits_to_keep and not all_logits:
            kwargs["logits_to_keep"] = 1  # skip the output head on positions we do not read
        logits = self.model(input_ids=input_ids, **kwargs).logits
        return logits if all_logits else logits[:, -1:]

    def prefilled_cache(
        self, token_ids: list[int], rollback: bool = True, capacity: int = 0
    ) -> DynamicCache:
        """A new cache holding `token_ids` (the prompt but its last token; no logits are read).
        `capacity` (the most positions the request may need) only matters to `FastRunner`.

        Sliding-window layers keep only their window unless told to record the past, which
        roll-back needs; as HF's assisted decoding does, recording starts after the prefill so
        a long prompt does not keep states the model would drop. A decoder that never rolls
        back (autoregressive) passes rollback=False and keeps the window-sized cache.
        """
        cache = self.new_cache()
        if token_ids:
            ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
            self.forward(ids, cache, all_logits=False)
        if rollback and hasattr(cache, "activate_past_recording"):
            cache.activate_past_recording()
        return cache


def check_forward_mode(name: str, value: str) -> str:
    if value not in FORWARD_MODES:
        raise ValueError(f"{name} must be one of {FORWARD_MODES}; got {value!r}")
    return value


def graphs_apply(model: torch.nn.Module, fast: str, cuda_graphs: str, device) -> bool:
    """Whether a decoder runs its forwards as CUDA graphs (`cuda_graphs.resolve_cuda_graphs`);
    they capture the fast forward, so "auto" stays eager where that cannot run and "on" says
    why it cannot."""
    wanted = resolve_cuda_graphs(cuda_graphs, torch.device(device))
    reason = "fast='off' was asked for" if fast == "off" else unsupported_reason(model)
    if wanted and reason is not None:
        if cuda_graphs == "on":
            raise ValueError(
                f"cuda_graphs='on' captures the fast forward, which cannot run: {reason}"
            )
        logger.info("CUDA graphs off: %s", reason)
        return False
    return wanted


def resolve_compile(model: torch.nn.Module, fast: str, compile: str) -> bool:
    """Whether to torch.compile the fast forward of `model` (checks fast/compile values).

    "auto": on for CUDA models with >= COMPILE_MIN_PARAMS parameters that the fast forward
    supports (see the measurements above COMPILE_MIN_PARAMS).
    A decoder resolves it once, from its verifier, and applies it to both models, so the
    speculative decoder and its autoregressive baseline run the verifier the same way."""
    check_forward_mode("fast", fast)
    check_forward_mode("compile", compile)
    if compile == "on" and fast == "off":
        raise ValueError("compile='on' compiles the fast forward: use fast='auto' or 'on'")
    if fast == "off" or compile == "off":
        return False
    reason = unsupported_reason(model)
    if compile == "on":
        if reason is not None:
            raise ValueError(
                f"compile='on' needs the fast forward, which cannot run {type(model).__name__} "
                f"({reason}): use compile='auto' or 'off'"
            )
        return True
    first = next(model.parameters(), None)
    on_cuda = first is not None and first.device.type == "cuda"
    return (
        on_cuda
        and reason is None
        and sum(p.numel() for p in model.parameters()) >= COMPILE_MIN_PARAMS
    )


def make_runner(
    model: torch.nn.Module,
    device: torch.device,
    fast: str = "auto",
    compiled: bool = False,
    sizes: tuple[int, ...] = (1,),
    linear_kernel: str | None = None,
) -> ModelRunner | FastRunner:
    """The forward path for one model: `FastRunner` (static cache, compact forward, compiled
    when `compiled`) or the eager HF `ModelRunner`. fast="auto" takes the fast forward for every
    architecture it supports (it matches HF's logits to ~1e-6; measured faster than HF's eager
    forward on the tiny models, ~1.5x, and on par to faster on SmolLM2, scripts/bench_forward.py)
    and HF's otherwise (e.g. Gemma 2). linear_kernel: see `FastRunner` ("auto": oneDNN on packed
    weights on x86 CPUs, measured flat over 1-8 new tokens; `cpu_kernels`); None: the module's
    DEFAULT_LINEAR_KERNEL."""
    check_forward_mode("fast", fast)
    reason = unsupported_reason(model)
    if fast == "on" and reason is not None:
        raise ValueError(
            f"fast='on' cannot run {type(model).__name__} ({reason}): use fast='auto' or 'off'"
        )
    if fast == "off" or reason is not None:
        if fast == "auto":
            logger.info("eager HF forward for %s: %s", type(model).__name__, reason)
        return ModelRunner(model, device)
    check_model_device(model, device)
    kernel = linear_kernel if linear_kernel is not None else DEFAULT_LINEAR_KERNEL
    return FastRunner(model, device, compile=compiled, sizes=sizes, linear_kernel=kernel)


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Rolls the cache back to its first `length` tokens (transformers 5.x: crop(-removed)).

    Layers that record their past (sliding window) are cropped even when nothing is removed:
    crop(0) trims them back to their window after a forward.
    """
    if isinstance(cache, StaticKVCache):
        cache.crop(length)  # a static cache rolls back by moving its length
        return
    removed = cache.get_seq_length() - length
    if removed < 0:
        raise RuntimeError(f"cannot crop a cache of {cache.get_seq_length()} to {length} tokens")
    if removed or any(getattr(layer, "record_past", False) for layer in cache.layers):
        cache.crop(-removed)


class Clock:
    """The engine's clocks.

    `clock()`: perf_counter that first waits for queued CUDA work (the batch-1 HF path, whose
    steps read the host anyway). `clock.mark()` / `clock.seconds(a, b)`: phase timing without a
    wait, for the batched steps: on CUDA a mark records an event in the stream and `seconds`
    reads two events' elapsed time, which is only valid once both have run, i.e. after a host
    read that followed them (a step reads its result once: its marks are read after that); on a
    CPU a mark is perf_counter."""

    def __init__(self, device: torch.device):
        self.device = device
        self.sync = device.type == "cuda"

    def __call__(self) -> float:
        if self.sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def mark(self):
        if not self.sync:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start, end) -> float:
        """Seconds from mark `start` to mark `end` (both passed by the device: class doc)."""
        if not self.sync:
            return end - start
        return start.elapsed_time(end) / 1000.0


def check_model_device(model: torch.nn.Module, device: torch.device) -> None:
    # Offloaded weights sit on the meta device until accelerate's hooks load them for a
    # forward: the first parameter that is really somewhere says where the model runs.
    params = (p for p in model.parameters() if p.device.type != "meta")
    param = next(params, None)
    if param is not None and param.device.type != device.type:
        raise ValueError(
            f"model {type(model).__name__} is on {param.device} but the decoder was given "
            f"device={device}; move it first with model.to({str(device)!r})"
        )


def resolve_eos_ids(tokenizer, model, eos_token_ids: Iterable[int] | int | None) -> frozenset:
    """The given ids, or (None) the tokenizer's eos plus the model's generation_config eos."""
    if eos_token_ids is not None:
        if isinstance(eos_token_ids, int):
            return frozenset([eos_token_ids])
        return frozenset(int(token) for token in eos_token_ids)
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif config_eos is not None:
        ids.update(int(token) for token in config_eos)
    return frozenset(ids)


def check_token_map(token_map: torch.Tensor | None, device: torch.device, *models):
    """Validates a 1-D int64 tensor of distinct vocabulary ids that every model can emit.

    Returns (token_map on device, its ids as a list) or (None, None)."""
    if token_map is None:
        return None, None
    if not isinstance(token_map, torch.Tensor) or token_map.dim() != 1 or token_map.numel() == 0:
        raise ValueError("token_map must be a non-empty 1-D LongTensor of shared vocabulary ids")
    if token_map.dtype.is_floating_point or bool((token_map < 0).any()):
        raise ValueError("token_map must hold non-negative integer vocabulary ids")
    ids = token_map.long().tolist()
    if len(set(ids)) != len(ids):
        raise ValueError("token_map must not repeat a vocabulary id")
    for model in models:
        vocab = output_vocab_size(model)
        if vocab is not None and max(ids) >= vocab:
            raise ValueError(
                f"token_map holds id {max(ids)} but {type(model).__name__} has only {vocab} "
                "output logits: keep only ids both models have"
            )
    return token_map.long().to(device), ids


def output_vocab_size(model: torch.nn.Module) -> int | None:
    """Number of logits the model emits, when it can be read without a forward."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    return int(vocab) if vocab is not None else None


def check_prompt(prompt_ids, max_new_tokens: int) -> list[int]:
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.reshape(-1).tolist()
    prompt_ids = [int(token) for token in prompt_ids]
    if not prompt_ids:
        raise ValueError("prompt_ids is empty: pass at least one token (e.g. a BOS token)")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1; got {max_new_tokens}")
    return prompt_ids
