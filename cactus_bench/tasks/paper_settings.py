"""The reference code's evaluation settings, applied on top of lm-eval's own task definitions.

The Cactus reference (spec.py, `prepare_task`) changes every generate-until task in three ways,
reproduced here on the loaded lm-eval `Task` objects:

1. generation kwargs: sampling with T = 0.6, top-p 0.95, top-k 20 (see `specs.PAPER_GEN_KWARGS`);
2. stop strings: the newline stops are removed and the chat end tokens added, so that a model
   that thinks in many lines is not cut off after its first one;
3. filters: a `<think>` remover runs first in every filter pipeline, so finished reasoning
   never reaches a scorer (an unfinished block: its tag removed and its text kept, as the
   reference does, or dropped with think_filter="strict"), and every "flexible-extract"
   pipeline gets a "flexible-extract-last" copy that ends with take-last, not take-first.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from lm_eval.api.filter import Filter, FilterEnsemble
from lm_eval.api.registry import register_filter
from lm_eval.api.task import Task

from cactus_bench.tasks.specs import CHAT_END_TOKENS, NEWLINE_STOPS, THINK_FILTERS

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_CLOSED_THINK_BLOCK = re.compile(r"<think>.*?</think>", flags=re.DOTALL)
_BEFORE_LAST_CLOSE = re.compile(r"^.*</think>", flags=re.DOTALL)  # block opened in the prompt
_UNCLOSED_THINK = re.compile(r"<think>.*$", flags=re.DOTALL)


def strip_thinking(text: str, think_filter: str = "paper") -> str:
    """The answer part of a response, with the reasoning removed as `think_filter` says.

    - closed `<think>...</think>` blocks are removed wherever they are;
    - a `</think>` without its `<think>` (templates such as DeepSeek-R1's open the block in the
      prompt) removes everything before it;
    - an unclosed `<think>` means the model ran out of tokens while reasoning. "paper" (the
      default, as the reference's RemoveThinkingToken filter) removes only the tag, so the
      unfinished reasoning is scored, e.g. a number GSM8K's flexible extract finds in it;
      "strict" removes everything from the tag on, so unfinished reasoning never scores.
    Leading newlines are dropped, as in the reference.
    """
    if think_filter not in THINK_FILTERS:
        raise ValueError(
            f"think_filter must be one of {', '.join(THINK_FILTERS)}; got {think_filter!r}"
        )
    text = _CLOSED_THINK_BLOCK.sub("", text)
    text = _BEFORE_LAST_CLOSE.sub("", text)
    if think_filter == "paper":
        text = text.replace(THINK_OPEN, "")
    else:
        text = _UNCLOSED_THINK.sub("", text)
    return text.lstrip("\n")


@register_filter("cactus_strip_thinking")
class StripThinkingFilter(Filter):
    """`strip_thinking(think_filter="paper")` on every response (one list per document)."""

    think_filter = "paper"

    def apply(self, resps, docs):
        return [
            [strip_thinking(response, self.think_filter) for response in doc_resps]
            for doc_resps in resps
        ]


@register_filter("cactus_strip_thinking_strict")
class StrictStripThinkingFilter(StripThinkingFilter):
    """`strip_thinking(think_filter="strict")`: unfinished reasoning is never scored."""

    think_filter = "strict"


THINK_FILTER_CLASSES = {"paper": StripThinkingFilter, "strict": StrictStripThinkingFilter}


@register_filter("cactus_take_last")
class TakeLastFilter(Filter):
    """Keeps the last response of each document (lm-eval only ships take_first)."""

    def apply(self, resps, docs):
        return [doc_resps[-1] for doc_resps in resps]


def paper_until(until: list[str] | str | None) -> list[str]:
    """The task's stop strings without the newline stops and with the chat end tokens."""
    if until is None:
        until = []
    if isinstance(until, str):  # the reference deletes newlines inside a single stop string
        until = [until.replace("\n", "")] if until.replace("\n", "") else []
    stops = [stop for stop in until if stop not in NEWLINE_STOPS]
    return stops + [token for token in CHAT_END_TOKENS if token not in stops]


def apply_paper_settings(
    task: Task, gen_kwargs: dict[str, Any], think_filter: str = "paper"
) -> None:
    """Changes a loaded lm-eval generate-until task in place as the reference code does.

    gen_kwargs (do_sample, temperature, top_p, top_k, max_gen_toks, optionally until) update
    the task's own generation kwargs; then the stop strings and filters are adjusted.
    think_filter: how the `<think>` remover scores an unfinished block (see strip_thinking).
    """
    remover = THINK_FILTER_CLASSES[think_filter]
    if task.get_config("output_type") != "generate_until":
        raise ValueError(
            f"task {task.get_config('task')!r} is {task.get_config('output_type')!r}; "
            "cactus-bench decodes, so use a generate_until task"
        )
    task.set_config(key="generation_kwargs", value=dict(gen_kwargs), update=True)
    until = task.get_config("generation_kwargs").get("until")
    task.set_config(key="generation_kwargs", value={"until": paper_until(until)}, update=True)

    pipelines: list[FilterEnsemble] = task._filters  # lm-eval has no public setter for these
    for pipeline in pipelines:
        if not any(step in THINK_FILTER_CLASSES.values() for step in pipeline.filters):
            pipeline.filters.insert(0, remover)
    names = {pipeline.name for pipeline in pipelines}
    for pipeline in list(pipelines):
        if pipeline.name == "flexible-extract" and "flexible-extract-last" not in names:
            # With one sample per prompt take-last equals take-first; recorded because the
            # reference reports it.
            last = copy.deepcopy(pipeline)
            last.name = "flexible-extract-last"
            last.filters[-1] = TakeLastFilter
            pipelines.append(last)
