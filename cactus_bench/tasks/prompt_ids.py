"""Token ids of a chat prompt: the one encoding that the run, the frontier, the benches, the GPU
check and the drafter's teacher share, so that a bench times the prompt a run decodes.

The tokenizer's chat template renders the text; the tokenizer then adds its special tokens
unless the rendered text already starts with the BOS token. A template that writes
`{{ bos_token }}` keeps its one BOS (adding would make two), and a tokenizer whose
post-processor adds a BOS its template does not write gets it once. Qwen3's tokenizer and the
embedded SmolLM2's add no special tokens, so for them this equals encoding without any.
Torch-free.
"""

from __future__ import annotations

from typing import Any


def rendered_prompt_ids(tokenizer, rendered: str) -> list[int]:
    """Token ids of a prompt the chat template has already rendered (lm-eval renders a task's
    prompts itself): special tokens are added unless `rendered` starts with the BOS token."""
    bos = getattr(tokenizer, "bos_token", None)
    add_special = not (bos and rendered.startswith(bos))
    return list(tokenizer.encode(rendered, add_special_tokens=add_special))


def chat_prompt_ids(tokenizer, text: str, chat_kwargs: dict[str, Any]) -> list[int]:
    """Token ids of `text` as one user turn with the generation prompt; `chat_kwargs` are the
    template's extra variables, such as {"enable_thinking": False}."""
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}],
        tokenize=False,
        add_generation_prompt=True,
        **chat_kwargs,
    )
    return rendered_prompt_ids(tokenizer, rendered)
