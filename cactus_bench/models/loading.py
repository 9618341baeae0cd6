"""``load_pair``: load a drafter and a verifier, check their tokenizers, decide the shared ids.

A model id is a hub id (with optional revision), a local directory, a ``.gguf`` file, or an
``embedded:`` id (see ``registry``). Hub code is never executed (``trust_remote_code=False``).
On CUDA the verifier loads with accelerate's ``device_map="auto"`` so that 14B/32B verifiers
spread over every visible GPU; the drafter goes to the first device.

The two tokenizers must agree on every id both models can emit, and differing output sizes
restrict both laws to the shared ids (``token_map``): the rule is ``token_map.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cactus_bench.models.devices import resolve_device
from cactus_bench.models.hub import (
    HubModelUnavailable,
    explain_unavailable,
    go_offline_if_unreachable,
    hub_commit,
)
from cactus_bench.models.registry import (
    EMBEDDED_PREFIX,
    SMOLLM2_DRAFTER_ID,
    SMOLLM2_VERIFIER_ID,
    TINY_DRAFTER_ID,
    TINY_VERIFIER_ID,
    PairSpec,
    get_pair_spec,
)
from cactus_bench.models.smollm2 import prepare_smollm2
from cactus_bench.models.token_map import output_size, shared_token_ids

# transformers, and the modules that import it (tiny, drafter, engine), load inside the functions
# that use them: the run's identity (RunIdentity.dtype: resolve_pair_dtype) needs torch only, so
# checking a run's config hash (a resumed or skipped run) never pays for importing transformers.
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedPair:
    """A ready pair: models in eval mode on their devices, the verifier's tokenizer, the map."""

    drafter: torch.nn.Module
    verifier: torch.nn.Module
    tokenizer: Any
    drafter_id: str
    verifier_id: str
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    token_map: torch.Tensor | None = None  # [K] int64 shared ids, or None (same output size)
    max_context: int | None = None
    # The hub commits the checkpoints were loaded from (None: local folder or embedded model):
    # an unpinned revision ("main") moves when the hub repository is updated.
    drafter_commit: str | None = None
    verifier_commit: str | None = None
    dtype: str = "float32"  # the dtype the models were loaded in, e.g. "bfloat16" (never "auto")


def resolve_dtype(
    dtype: str | torch.dtype, device: torch.device, cpu_bf16: bool = False
) -> torch.dtype | str:
    """A torch dtype, or ``"auto"`` (on CUDA: the checkpoint's dtype, resolved by the loader).

    ``"auto"`` on a CPU is float32, except with ``cpu_bf16`` (the embedded SmolLM2 pair):
    bfloat16 where the CPU computes bf16 products in hardware (``cpu_kernels.auto_cpu_dtype``:
    the avx512_bf16 or amx_bf16 flag and torch's oneDNN), float32 otherwise.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto" and device.type == "cpu" and cpu_bf16:
        from cactus_bench.engine.cpu_kernels import auto_cpu_dtype  # lazy: as the top says

        return auto_cpu_dtype()
    if dtype == "auto":
        return "auto" if device.type == "cuda" else torch.float32
    if dtype not in TORCH_DTYPES:
        raise ValueError(
            f"dtype must be one of {', '.join([*TORCH_DTYPES, 'auto'])}; got {dtype!r}"
        )
    return TORCH_DTYPES[dtype]


def resolve_pair_dtype(
    spec: PairSpec | str, device: str | torch.device, dtype: str | torch.dtype | None = None
) -> torch.dtype | str:
    """The dtype `load_pair(spec, device, dtype)` loads both models in, known before loading:
    a torch dtype, or "auto" for a hub pair on CUDA (the checkpoint's; `LoadedPair.dtype` then
    says which). "auto" picks bfloat16 on CPU only for the embedded SmolLM2 pair."""
    spec = get_pair_spec(spec) if isinstance(spec, str) else spec
    cpu_bf16 = spec.verifier == SMOLLM2_VERIFIER_ID  # auto: bf16 where the CPU has it natively
    chosen = dtype if dtype is not None else spec.dtype
    return resolve_dtype(chosen, resolve_device(device), cpu_bf16)


def _source(model_id: str) -> tuple[str, dict[str, Any]]:
    """(pretrained path or hub id, extra from_pretrained kwargs) for a non-embedded id."""
    path = Path(model_id).expanduser()
    if model_id.endswith(".gguf"):
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {model_id} not found")
        # transformers dequantises GGUF weights to the requested dtype on load.
        return str(path.parent), {"gguf_file": path.name}
    if path.is_dir():
        return str(path), {}
    return model_id, {}


def load_tokenizer(model_id: str, revision: str | None = None):
    """The tokenizer for a hub id, local directory or GGUF file (never remote code)."""
    from transformers import AutoTokenizer  # lazy: transformers (see the top)

    if model_id in (TINY_DRAFTER_ID, TINY_VERIFIER_ID):
        from cactus_bench.models.tiny import make_tiny_tokenizer  # lazy: transformers (see the top)

        return make_tiny_tokenizer()
    if model_id in (SMOLLM2_DRAFTER_ID, SMOLLM2_VERIFIER_ID):
        return AutoTokenizer.from_pretrained(str(prepare_smollm2()))
    source, extra = _source(model_id)
    return AutoTokenizer.from_pretrained(
        source, revision=revision, trust_remote_code=False, **extra
    )


def load_model(
    model_id: str,
    device: torch.device,
    dtype: torch.dtype | str,
    revision: str | None = None,
    spread: bool = False,
) -> torch.nn.Module:
    """A causal LM in eval mode; ``spread`` uses ``device_map="auto"`` (CUDA only)."""
    from transformers import AutoModelForCausalLM  # lazy: transformers (see the top)

    if model_id.startswith(EMBEDDED_PREFIX):
        raise ValueError(f"{model_id} is built by load_pair, not load_model")
    source, extra = _source(model_id)
    kwargs: dict[str, Any] = {"dtype": dtype, "revision": revision, "trust_remote_code": False}
    if spread and device.type == "cuda":
        kwargs["device_map"] = "auto"
    model = AutoModelForCausalLM.from_pretrained(source, **kwargs, **extra)
    if "device_map" not in kwargs:
        model = model.to(device)
    return model.eval()


def _load_embedded_smollm2(device: torch.device, dtype: torch.dtype | str):
    from transformers import LlamaForCausalLM  # lazy: transformers (see the top)

    from cactus_bench.models.drafter import load_drafter  # lazy: transformers (see the top)

    dtype = torch.float32 if dtype == "auto" else dtype
    model_dir = prepare_smollm2()
    verifier = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
    return load_drafter(verifier), verifier


def load_pair(
    spec: PairSpec | str,
    device: str | torch.device = "cpu",
    dtype: str | torch.dtype | None = None,
) -> LoadedPair:
    """Load ``spec`` (a PairSpec or a registered name) on ``device`` (``"auto"`` allowed).

    ``dtype`` defaults to the spec's. Returns a LoadedPair whose ``token_map`` is the shared-id
    restriction (None when both models emit the same number of logits).
    """
    spec = get_pair_spec(spec) if isinstance(spec, str) else spec
    device = resolve_device(device)
    torch_dtype = resolve_pair_dtype(spec, device, dtype)
    embedded = {spec.drafter, spec.verifier} & {
        SMOLLM2_DRAFTER_ID,
        SMOLLM2_VERIFIER_ID,
        TINY_DRAFTER_ID,
        TINY_VERIFIER_ID,
    }
    if embedded:
        drafter, verifier, tokenizer = _load_embedded(spec, device, torch_dtype)
        drafter_tokenizer = tokenizer
    else:
        for model_id in (spec.drafter, spec.verifier):
            if model_id.startswith(EMBEDDED_PREFIX):
                raise ValueError(f"unknown embedded model {model_id!r} in pair {spec.name}")
        verifier_args = ("verifier", spec.verifier, spec.verifier_revision)
        drafter_args = ("drafter", spec.drafter, spec.drafter_revision)
        go_offline_if_unreachable(
            [args for args in (verifier_args, drafter_args) if _is_hub(args[1])]
        )
        tokenizer = _explained(*verifier_args, load_tokenizer)
        drafter_tokenizer = _explained(*drafter_args, load_tokenizer)
        verifier = _explained(*verifier_args, load_model, device, torch_dtype, spread=True)
        drafter = _explained(*drafter_args, load_model, device, torch_dtype, spread=False)
    token_map = shared_token_ids(
        drafter_tokenizer,
        tokenizer,
        output_size(drafter),
        output_size(verifier),
        spec.drafter,
        spec.verifier,
    )
    commits = {
        role: hub_commit(model_id, revision)
        for role, model_id, revision in (
            ("drafter", spec.drafter, spec.drafter_revision),
            ("verifier", spec.verifier, spec.verifier_revision),
        )
    }
    return LoadedPair(
        drafter_commit=commits["drafter"],
        verifier_commit=commits["verifier"],
        drafter=drafter,
        verifier=verifier,
        tokenizer=tokenizer,
        drafter_id=spec.drafter,
        verifier_id=spec.verifier,
        chat_template_kwargs=dict(spec.chat_template_kwargs),
        token_map=token_map,
        max_context=spec.max_context,
        dtype=str(next(verifier.parameters()).dtype).removeprefix("torch."),
    )


def _is_hub(model_id: str) -> bool:
    """A hub id (not a local folder, GGUF file or embedded id)."""
    return _source(model_id)[0] == model_id and not Path(model_id).expanduser().exists()


def _explained(role: str, model_id: str, revision: str | None, load, *args, **kwargs):
    """`load(model_id, *args, revision=revision, **kwargs)`; a hub checkpoint that cannot be
    loaded (not cached offline, gated, unknown revision) fails with one line naming the fix."""
    try:
        return load(model_id, *args, revision=revision, **kwargs)
    except OSError as error:
        reason = explain_unavailable(model_id, revision, role, error) if _is_hub(model_id) else None
        if reason is None:
            raise
        raise HubModelUnavailable(reason) from error


def _load_embedded(spec: PairSpec, device: torch.device, dtype: torch.dtype | str):
    """The two embedded pairs; mixing an embedded model with another is not supported."""
    if (spec.drafter, spec.verifier) == (SMOLLM2_DRAFTER_ID, SMOLLM2_VERIFIER_ID):
        drafter, verifier = _load_embedded_smollm2(device, dtype)
        return drafter, verifier, load_tokenizer(SMOLLM2_VERIFIER_ID)
    if (spec.drafter, spec.verifier) == (TINY_DRAFTER_ID, TINY_VERIFIER_ID):
        from cactus_bench.models.tiny import make_tiny_pair  # lazy: transformers (see the top)

        dtype = torch.float32 if dtype == "auto" else dtype
        drafter, verifier, tokenizer = make_tiny_pair(seed=0)
        return drafter.to(device, dtype), verifier.to(device, dtype), tokenizer
    raise ValueError(
        f"pair {spec.name}: embedded models only pair as {SMOLLM2_DRAFTER_ID} -> "
        f"{SMOLLM2_VERIFIER_ID} or {TINY_DRAFTER_ID} -> {TINY_VERIFIER_ID}"
    )
