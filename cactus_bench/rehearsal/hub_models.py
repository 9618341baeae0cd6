"""The paper's hub checkpoints as the rehearsal rebuilds them: real config fields, tiny sizes.

Each `HubModel` is one hub repository a pair YAML names. Its `config` is the checkpoint's
config.json as published on the hub (transformers 4.x field names: `rope_theta`,
`rope_scaling`, `torch_dtype`), written from the public model cards and config files; only the
size fields in `REAL_SIZE_FIELDS` are replaced by `TINY_SIZES` when the cache is built, so the
architecture class, vocabulary size, tied or untied head, special-token ids, rope scaling,
sliding windows and soft-capping stay the real ones. `real_sizes` keeps the published sizes for
the snapshot's README.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Size fields that are shrunk; every other config field is written as published.
REAL_SIZE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_window_layers",
    "query_pre_attn_scalar",
)
TINY_SIZES = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_window_layers": 2,
    "query_pre_attn_scalar": 16,  # Gemma 2 scales attention by head_dim (256 in the real ones)
}

# Tokenizer sources: "qwen3" is the real one (../shared/tokenizers/qwen3); the others are the
# stand-ins built in rehearsal/tokenizers.py (no real tokenizer of those families is at hand).
TOKENIZER_KINDS = ("qwen3", "deepseek_r1", "llama3", "gemma2")


@dataclass(frozen=True)
class HubModel:
    repo_id: str  # "Qwen/Qwen3-8B"
    family: str  # models of one family share base weights, so drafts are sometimes accepted
    tokenizer: str  # one of TOKENIZER_KINDS
    config: dict[str, Any]
    generation_config: dict[str, Any]
    real_sizes: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return int(self.config["vocab_size"])


def _split(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config with tiny sizes, the published sizes it replaced)."""
    real = {key: config[key] for key in REAL_SIZE_FIELDS if key in config}
    return {**config, **{key: TINY_SIZES[key] for key in real}}, real


def _model(repo_id, family, tokenizer, config, generation_config) -> HubModel:
    tiny, real = _split(config)
    return HubModel(repo_id, family, tokenizer, tiny, generation_config, real)


# ---- Qwen3 (tokenizer: real) -------------------------------------------------------------------
_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 40960,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
_QWEN3_GENERATION = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
    "transformers_version": "4.51.0",
}
_QWEN3_SIZES = {  # hidden, intermediate, layers, heads, tied head
    "Qwen3-0.6B": (1024, 3072, 28, 16, True),
    "Qwen3-1.7B": (2048, 6144, 28, 16, True),
    "Qwen3-8B": (4096, 12288, 36, 32, False),
    "Qwen3-14B": (5120, 17408, 40, 40, False),
    "Qwen3-32B": (5120, 25600, 64, 64, False),
}

# ---- DeepSeek-R1-Distill-Qwen (Qwen2 architecture; output sizes differ) ------------------------
_R1 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.44.0",
    "use_cache": True,
    "use_mrope": False,
    "use_sliding_window": False,
}
_R1_GENERATION = {
    "_from_model_config": True,
    "bos_token_id": 151646,
    "eos_token_id": 151643,
    "do_sample": True,
    "temperature": 0.6,
    "top_p": 0.95,
    "transformers_version": "4.39.3",
}
_R1_SIZES = {  # hidden, intermediate, layers, heads, kv heads, window layers, vocab
    "DeepSeek-R1-Distill-Qwen-1.5B": (1536, 8960, 28, 12, 2, 21, 151936),
    "DeepSeek-R1-Distill-Qwen-7B": (3584, 18944, 28, 28, 4, 28, 152064),
}

# ---- Llama 3.1 / 3.2 Instruct (tokenizer: stand-in) --------------------------------------------
_LLAMA3 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0",
    "use_cache": True,
    "vocab_size": 128256,
}
_LLAMA3_GENERATION = {
    "bos_token_id": 128000,
    "do_sample": True,
    "eos_token_id": [128001, 128008, 128009],
    "temperature": 0.6,
    "top_p": 0.9,
    "transformers_version": "4.45.0",
}


def _llama3_rope(factor: float) -> dict[str, Any]:
    return {
        "factor": factor,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    }


# ---- Gemma 2 instruction-tuned (tokenizer: stand-in) -------------------------------------------
_GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": [1, 107],
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh",
    "initializer_range": 0.02,
    "max_position_embeddings": 8192,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.4",
    "use_cache": True,
    "vocab_size": 256000,
}
_GEMMA2_GENERATION = {
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": [1, 107],
    "pad_token_id": 0,
    "transformers_version": "4.42.4",
}


def _hub_models() -> dict[str, HubModel]:
    models = []
    for name, (hidden, inter, layers, heads, tied) in _QWEN3_SIZES.items():
        sizes = {
            "hidden_size": hidden,
            "intermediate_size": inter,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "max_window_layers": layers,
            "tie_word_embeddings": tied,
        }
        models.append(
            _model(f"Qwen/{name}", "qwen3", "qwen3", {**_QWEN3, **sizes}, _QWEN3_GENERATION)
        )
    for name, (hidden, inter, layers, heads, kv, window, vocab) in _R1_SIZES.items():
        sizes = {
            "hidden_size": hidden,
            "intermediate_size": inter,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
            "max_window_layers": window,
            "vocab_size": vocab,
        }
        config = {**_R1, **sizes}
        models.append(_model(f"deepseek-ai/{name}", "r1", "deepseek_r1", config, _R1_GENERATION))
    llamas = {  # repo: hidden, intermediate, layers, heads, head_dim, tied, rope factor
        "meta-llama/Llama-3.2-1B-Instruct": (2048, 8192, 16, 32, 64, True, 32.0),
        "meta-llama/Llama-3.1-8B-Instruct": (4096, 14336, 32, 32, 128, False, 8.0),
    }
    for repo, (hidden, inter, layers, heads, head_dim, tied, factor) in llamas.items():
        sizes = {
            "hidden_size": hidden,
            "intermediate_size": inter,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "head_dim": head_dim,
            "tie_word_embeddings": tied,
            "rope_scaling": _llama3_rope(factor),
        }
        models.append(_model(repo, "llama3", "llama3", {**_LLAMA3, **sizes}, _LLAMA3_GENERATION))
    gemmas = {  # repo: hidden, intermediate, layers, heads, kv heads (embeddings tied in both)
        "google/gemma-2-2b-it": (2304, 9216, 26, 8, 4),
        "google/gemma-2-9b-it": (3584, 14336, 42, 16, 8),
    }
    for repo, (hidden, inter, layers, heads, kv) in gemmas.items():
        sizes = {
            "hidden_size": hidden,
            "intermediate_size": inter,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": kv,
        }
        models.append(_model(repo, "gemma2", "gemma2", {**_GEMMA2, **sizes}, _GEMMA2_GENERATION))
    return {model.repo_id: model for model in models}


HUB_MODELS: dict[str, HubModel] = _hub_models()


def hub_model(repo_id: str) -> HubModel:
    if repo_id not in HUB_MODELS:
        raise ValueError(
            f"the rehearsal has no stand-in for {repo_id!r}; known: {', '.join(HUB_MODELS)}"
        )
    return HUB_MODELS[repo_id]
