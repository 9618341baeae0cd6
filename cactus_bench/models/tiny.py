"""A tiny random drafter/verifier pair and a byte-level tokenizer, built in memory from a seed.

For tests and smoke runs: no download, no disk, well under a second. The verifier is a small
random causal LM; the drafter shares its embeddings, final norm and output head and copies its
first decoder layer with some noise (the verifier's later layers are damped), so it agrees with
the verifier often but not always: a drafter that is neither useless nor identical, like a real
small model of the same family. The output head is scaled up so the next-token distributions are
peaked rather than near-uniform.

    drafter, verifier, tokenizer = make_tiny_pair(seed=0)
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForCausalLM,
)

ARCHITECTURES = ("qwen3", "llama")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
CHAT_START_TOKEN = "<|im_start|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Multi-byte tokens, so that some tokens span several characters (as in real vocabularies) and
# stop strings can end in the middle of a token. "Ġ" is the byte-level space, "Ċ" the newline.
MERGED_WORDS = "Ġthe Ġand Ġof Ġto Ġis Ġin Ġanswer ing The Answer ĠQ :: .Ċ Ġ=".split()
HIDDEN_SIZE = 64
VERIFIER_LAYERS = 3
DRAFTER_LAYERS = 1
HEAD_SCALE = 15.0  # lm_head multiplier: peaked next-token laws (entropy ~3.3 of 5.7 nats at T=1)
LATER_LAYER_SCALE = 0.3  # shrinks the residual writes of verifier layers 1.. (drafter lacks them)
DRAFTER_NOISE = 0.3  # relative noise on the drafter's copy of layer 0
# With these, 1 - TV(p, q) is ~0.66 at T=0.6, top-k 20 and ~0.75 at T=1 (seed 0).


def _bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte-level alphabet: printable bytes map to themselves, the rest above 255."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def make_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer: ids 0-255 are the bytes, then a few merges, then specials.

    It has eos (`<|im_end|>`), pad (`<|endoftext|>`) and a ChatML-like `chat_template`, so
    `apply_chat_template` works as with Qwen models. Any text round-trips through it.
    """
    vocab = {char: byte for byte, char in _bytes_to_unicode().items()}  # id == byte value
    merges: list[tuple[str, str]] = []
    for word in MERGED_WORDS:
        for end in range(2, len(word) + 1):  # build each word left to right, one char at a time
            if word[:end] not in vocab:
                merges.append((word[: end - 1], word[end - 1]))
                vocab[word[:end]] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[CHAT_START_TOKEN],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _config(arch: str, vocab_size: int, num_layers: int, eos_id: int, pad_id: int):
    common = dict(
        vocab_size=vocab_size,
        hidden_size=HIDDEN_SIZE,
        intermediate_size=2 * HIDDEN_SIZE,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    if arch == "qwen3":
        return Qwen3Config(head_dim=HIDDEN_SIZE // 4, **common)
    return LlamaConfig(**common)


def _build(arch: str, config) -> PreTrainedModel:
    model_class = Qwen3ForCausalLM if arch == "qwen3" else LlamaForCausalLM
    model = model_class(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return model.eval()


def make_tiny_pair(
    seed: int = 0, vocab_size: int | None = None, arch: str = "qwen3"
) -> tuple[PreTrainedModel, PreTrainedModel, PreTrainedTokenizerFast]:
    """Returns `(drafter, verifier, tokenizer)`: random float32 CPU models in eval mode.

    vocab_size defaults to the tokenizer's length; a larger value leaves unused ids at the end
    of the embedding (as real checkpoints do). The same seed always gives the same weights.
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"arch must be one of {ARCHITECTURES}; got {arch!r}")
    tokenizer = make_tiny_tokenizer()
    vocab_size = len(tokenizer) if vocab_size is None else vocab_size
    if vocab_size < len(tokenizer):
        raise ValueError(f"vocab_size must be >= {len(tokenizer)} (the tokenizer's length)")
    eos_id, pad_id = tokenizer.eos_token_id, tokenizer.pad_token_id

    # Weight init draws from the global RNG: fork it so the caller's random state is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        verifier = _build(arch, _config(arch, vocab_size, VERIFIER_LAYERS, eos_id, pad_id))
        drafter = _build(arch, _config(arch, vocab_size, DRAFTER_LAYERS, eos_id, pad_id))
        with torch.no_grad():
            verifier.lm_head.weight.mul_(HEAD_SCALE)
            for layer in verifier.model.layers[1:]:
                layer.self_attn.o_proj.weight.mul_(LATER_LAYER_SCALE)
                layer.mlp.down_proj.weight.mul_(LATER_LAYER_SCALE)
            # Drafter = verifier's embeddings, head, final norm and a noisy copy of layer 0.
            drafter.model.embed_tokens.weight.copy_(verifier.model.embed_tokens.weight)
            drafter.lm_head.weight.copy_(verifier.lm_head.weight)
            drafter.model.norm.weight.copy_(verifier.model.norm.weight)
            first_layers = (verifier.model.layers[0], drafter.model.layers[0])
            for source, target in zip(*(x.parameters() for x in first_layers), strict=True):
                target.copy_(source + DRAFTER_NOISE * source.std() * torch.randn_like(source))
    return drafter, verifier, tokenizer
