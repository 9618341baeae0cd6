"""Tokenizer files for the rehearsal snapshots: the real Qwen3 one, and stand-ins built from it.

- qwen3: the real files from ../shared/tokenizers/qwen3 (151,669 tokens), copied unchanged.
- deepseek_r1: DeepSeek-R1-Distill-Qwen's tokenizer is Qwen2.5's byte-level BPE (the same 151,643
  regular tokens as Qwen3's) with DeepSeek's own added tokens at 151643-151664, a BOS added by
  the post-processor, `tokenizer_class: LlamaTokenizerFast` and a chat template that opens
  `<think>` in the prompt. Rebuilt here from the Qwen3 BPE with those ids and flags; the chat
  template is a short R1-style one written for the rehearsal (no tool calls).
- llama3: STAND-IN. Llama 3's tiktoken BPE is not at hand: the Qwen BPE cut to its first 128,000
  tokens, with Llama 3's 256 special tokens at their real ids 128000-128255, BOS by the
  post-processor, and a short Llama-3-style header/eot chat template.
- gemma2: STAND-IN. Gemma 2's SentencePiece model is not at hand: Gemma's special tokens at their
  real ids (0-3, 106-107), then the Qwen BPE shifted by 108 (151,751 tokens for 256,000 rows),
  BOS by the post-processor, and a Gemma-style turn template that rejects a system role.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
from pathlib import Path
from typing import Any

QWEN3_FILES = ("tokenizer.json", "tokenizer_config.json")

R1_ADDED = (  # id 151643 + index; special flag as in DeepSeek's tokenizer.json
    ("<｜end▁of▁sentence｜>", True),
    ("<｜User｜>", False),
    ("<｜Assistant｜>", False),
    ("<｜begin▁of▁sentence｜>", True),
    ("<|EOT|>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
R1_BOS, R1_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
R1_TEMPLATE = (
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{% set ns.system = message['content'] %}{% endif %}{% endfor %}"
    "{{ bos_token }}{{ ns.system }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{% elif message['role'] == 'assistant' %}{% set content = message['content'] %}"
    "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{ '<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<｜Assistant｜><think>\\n' }}{% endif %}"
)

LLAMA3_FIRST_SPECIAL = 128000
LLAMA3_NAMED = {  # the others are <|reserved_special_token_N|>
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128004: "<|finetune_right_pad_id|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128008: "<|eom_id|>",
    128009: "<|eot_id|>",
    128010: "<|python_tag|>",
}
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

GEMMA2_SPECIALS = (
    ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<2mass>", "[@BOS@]"]
    + [f"<unused{index}>" for index in range(99)]
    + ["<start_of_turn>", "<end_of_turn>"]
)  # ids 0..107
GEMMA2_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def write_tokenizer(kind: str, folder: Path, qwen3_dir: Path) -> None:
    """Write `kind`'s tokenizer.json and tokenizer_config.json into `folder`."""
    if kind == "qwen3":
        for name in QWEN3_FILES:
            shutil.copyfile(qwen3_dir / name, folder / name)
        return
    builders = {"deepseek_r1": _deepseek_r1, "llama3": _llama3, "gemma2": _gemma2}
    if kind not in builders:
        raise ValueError(f"unknown tokenizer kind {kind!r}; known: qwen3, {', '.join(builders)}")
    tokenizer, config = builders[kind](_qwen3_tokenizer_json(str(qwen3_dir)))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2))


@functools.cache
def _qwen3_tokenizer_json(qwen3_dir: str) -> dict[str, Any]:
    return json.loads((Path(qwen3_dir) / "tokenizer.json").read_text(encoding="utf-8"))


def _added(token_id: int, content: str, special: bool) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _bos_post_processor(bos: str, bos_id: int) -> dict[str, Any]:
    """HF's TemplateProcessing that puts BOS in front of every encoded text."""
    single = [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    pair = single + [
        {"SpecialToken": {"id": bos, "type_id": 1}},
        {"Sequence": {"id": "B", "type_id": 1}},
    ]
    special = {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}}
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}


def _deepseek_r1(qwen3: dict[str, Any]) -> tuple[dict, dict]:
    tokenizer = copy.deepcopy(qwen3)
    first = len(tokenizer["model"]["vocab"])  # 151643: DeepSeek's added tokens start there
    tokenizer["added_tokens"] = [
        _added(first + index, content, special) for index, (content, special) in enumerate(R1_ADDED)
    ]
    tokenizer["post_processor"] = _bos_post_processor(R1_BOS, first + 3)
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": R1_BOS,
        "eos_token": R1_EOS,
        "pad_token": R1_EOS,
        "unk_token": None,
        "legacy": True,
        "model_max_length": 16384,
        "clean_up_tokenization_spaces": False,
        "tokenizer_class": "LlamaTokenizerFast",
        "chat_template": R1_TEMPLATE,
    }
    return tokenizer, config


def _cut_bpe(model: dict[str, Any], size: int, offset: int = 0) -> dict[str, Any]:
    """The BPE model restricted to its first `size` tokens (and the merges among them), with
    every id shifted by `offset`."""
    vocab = {token: index + offset for token, index in model["vocab"].items() if index < size}
    merges = [
        pair for pair in model["merges"] if "".join(pair) in vocab and all(p in vocab for p in pair)
    ]
    return {**model, "vocab": vocab, "merges": merges}


def _llama3(qwen3: dict[str, Any]) -> tuple[dict, dict]:
    tokenizer = copy.deepcopy(qwen3)
    tokenizer["model"] = _cut_bpe(qwen3["model"], LLAMA3_FIRST_SPECIAL)
    reserved = iter(range(256))
    tokenizer["added_tokens"] = [
        _added(
            token_id,
            LLAMA3_NAMED.get(token_id) or f"<|reserved_special_token_{next(reserved)}|>",
            True,
        )
        for token_id in range(LLAMA3_FIRST_SPECIAL, LLAMA3_FIRST_SPECIAL + 256)
    ]
    tokenizer["post_processor"] = _bos_post_processor("<|begin_of_text|>", LLAMA3_FIRST_SPECIAL)
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
        "clean_up_tokenization_spaces": True,
        "model_max_length": 131072,
        "model_input_names": ["input_ids", "attention_mask"],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": LLAMA3_TEMPLATE,
    }
    return tokenizer, config


def _gemma2(qwen3: dict[str, Any]) -> tuple[dict, dict]:
    tokenizer = copy.deepcopy(qwen3)
    specials = len(GEMMA2_SPECIALS)
    model = _cut_bpe(qwen3["model"], len(qwen3["model"]["vocab"]), offset=specials)
    model["vocab"] = {
        **{token: index for index, token in enumerate(GEMMA2_SPECIALS)},
        **model["vocab"],
    }
    tokenizer["model"] = model
    tokenizer["added_tokens"] = [
        _added(index, token, True)
        for index, token in enumerate(GEMMA2_SPECIALS)
        if not token.startswith("<unused")
    ]
    tokenizer["post_processor"] = _bos_post_processor("<bos>", 2)
    config = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"],
        "clean_up_tokenization_spaces": False,
        "model_max_length": 8192,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": GEMMA2_TEMPLATE,
    }
    return tokenizer, config
