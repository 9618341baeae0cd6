"""The stop set S: EOS, the chat template's turn closer and end-of-text; think tags apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from cactus_bench.models import smollm2
from cactus_bench.models.tiny import make_tiny_tokenizer
from cactus_bench.tasks.stop_set import StopSet, stop_set

REPO = Path(__file__).resolve().parents[1]
# The real Qwen3 tokenizer sits in shared/ beside the checkout (or beside its worktree folder).
QWEN3 = next(
    (
        folder / "shared" / "tokenizers" / "qwen3"
        for folder in REPO.parents
        if (folder / "shared" / "tokenizers" / "qwen3" / "tokenizer.json").exists()
    ),
    None,
)


@pytest.mark.skipif(QWEN3 is None, reason="shared/tokenizers/qwen3 is absent")
@pytest.mark.parametrize("thinking", [None, True, False])
def test_qwen3_stops_on_im_end_and_endoftext_with_think_tags_apart(thinking):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3))
    kwargs = None if thinking is None else {"enable_thinking": thinking}
    stops = stop_set(tokenizer, kwargs)
    ids = tokenizer.convert_tokens_to_ids
    assert stops == StopSet(
        stop_ids=(ids("<|endoftext|>"), ids("<|im_end|>")),
        think_open=ids("<think>"),
        think_close=ids("</think>"),
    )
    assert stops.stop_ids == (151643, 151645)
    assert (stops.think_open, stops.think_close) == (151667, 151668)


@pytest.mark.skipif(not smollm2.is_prepared(), reason="converted SmolLM2 absent")
def test_smollm2_stops_on_im_end_and_endoftext_and_has_no_think_tags():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2.smollm2_dir()))
    stops = stop_set(tokenizer)
    assert stops == StopSet(stop_ids=(0, 2), think_open=None, think_close=None)
    assert tokenizer.convert_ids_to_tokens([0, 2]) == ["<|endoftext|>", "<|im_end|>"]


def test_the_turn_closer_comes_from_the_template_not_from_eos():
    # eos moved to <|endoftext|>: <|im_end|> must still be found, from the rendered turn.
    tokenizer = make_tiny_tokenizer()
    tokenizer.eos_token = "<|endoftext|>"
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert im_end in stop_set(tokenizer).stop_ids
    # A template that closes turns with its own token: that token joins S, the next turn's
    # header (<|im_start|>, after the newline) does not.
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|eot|>", "<|im_start|>"]})
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|eot|>\n"
        "{% endfor %}"
    )
    stops = stop_set(tokenizer)
    eot = tokenizer.convert_tokens_to_ids("<|eot|>")
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert stops.stop_ids == tuple(sorted({eot, endoftext}))
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") not in stops.stop_ids


def test_without_a_chat_template_only_eos_and_end_of_text_stop():
    tokenizer = make_tiny_tokenizer()
    tokenizer.chat_template = None
    eos = tokenizer.eos_token_id
    endoftext = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert stop_set(tokenizer).stop_ids == tuple(sorted({eos, endoftext}))


def test_think_tags_are_found_only_as_single_added_tokens():
    tokenizer = make_tiny_tokenizer()
    assert (stop_set(tokenizer).think_open, stop_set(tokenizer).think_close) == (None, None)
    tokenizer.add_tokens(["<think>", "</think>"])
    stops = stop_set(tokenizer)
    assert stops.think_open == tokenizer.convert_tokens_to_ids("<think>")
    assert stops.think_close == tokenizer.convert_tokens_to_ids("</think>")
    assert {stops.think_open, stops.think_close}.isdisjoint(stops.stop_ids)


def test_a_template_that_drops_the_answer_is_refused():
    tokenizer = make_tiny_tokenizer()
    tokenizer.chat_template = "{% for m in messages %}{{ m['role'] }}\n{% endfor %}"
    with pytest.raises(ValueError, match="dropped the assistant's answer"):
        stop_set(tokenizer)
