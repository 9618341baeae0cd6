"""The stop set S of a tokenizer: the tokens whose emission ends an answer.

```python
from cactus_bench.tasks.stop_set import stop_set
stops = stop_set(tokenizer, chat_template_kwargs={"enable_thinking": False})
stops.stop_ids     # (151643, 151645) for Qwen3: <|endoftext|>, <|im_end|>
stops.think_open   # 151667 (<think>), or None where the vocabulary has no such single token
```
S holds the tokenizer's EOS, the token(s) that close an assistant turn in the chat template
and the end-of-text token. A lossy rule that lowers the emitted law's mass on S lowers the stop
hazard per position, so answers run longer: S is what the stop-mass diagnostics sum over.
`<think>` and `</think>` end no answer (the answer follows them), so they are kept apart.
"""

from __future__ import annotations

from dataclasses import dataclass

# Stands in for an assistant's answer when rendering a one-turn chat: whatever the template
# writes after it closes the turn. Plain ASCII that no template rewrites.
_ANSWER_MARKER = "Stop set marker answer"
# Names the end-of-text token has across the families this project meets (Qwen, SmolLM2,
# Llama 3, GPT-2 style byte-level BPEs).
_END_OF_TEXT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<|eot_id|>")


@dataclass(frozen=True)
class StopSet:
    """Vocabulary ids: `stop_ids` sorted and distinct; the think tags None when absent."""

    stop_ids: tuple[int, ...]
    think_open: int | None
    think_close: int | None


def stop_set(tokenizer, chat_template_kwargs: dict | None = None) -> StopSet:
    """S from the tokenizer's eos, its end-of-text token and its chat template's turn closer."""
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    for name in _END_OF_TEXT_NAMES:
        token_id = _single_token_id(tokenizer, name)
        if token_id is not None:
            ids.add(token_id)
    ids.update(_turn_closers(tokenizer, chat_template_kwargs or {}))
    return StopSet(
        stop_ids=tuple(sorted(ids)),
        think_open=_single_token_id(tokenizer, "<think>"),
        think_close=_single_token_id(tokenizer, "</think>"),
    )


def _single_token_id(tokenizer, text: str) -> int | None:
    """The id of `text` where the vocabulary holds it as one added or special token."""
    added = tokenizer.get_added_vocab()  # {content: id} of added and special tokens
    if text in added:
        return int(added[text])
    return None


def _turn_closers(tokenizer, chat_template_kwargs: dict) -> set[int]:
    """The special tokens the chat template writes right after an assistant's answer.

    Renders [user, assistant(marker)] and tokenizes what follows the marker: its leading run of
    added tokens (`<|im_end|>` for ChatML; `<|eot_id|>` for Llama 3) closes the turn. Text after
    that run (a newline, the next turn's header) is no stop. No template: no closer."""
    if not getattr(tokenizer, "chat_template", None):
        return set()
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": _ANSWER_MARKER},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, **chat_template_kwargs)
    cut = rendered.rfind(_ANSWER_MARKER)
    if cut < 0:
        raise ValueError("the chat template dropped the assistant's answer: no turn closer found")
    after = rendered[cut + len(_ANSWER_MARKER) :]
    added_ids = set(tokenizer.get_added_vocab().values())
    closers: set[int] = set()
    for token_id in tokenizer.encode(after, add_special_tokens=False):
        if int(token_id) not in added_ids:
            break
        closers.add(int(token_id))
    return closers
