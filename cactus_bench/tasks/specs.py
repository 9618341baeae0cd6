"""The tasks this harness runs, as lm-evaluation-harness tasks, and the paper's evaluation settings.

Every task is one of lm-eval's own task definitions (prompt, filters, metrics), so its score is
the community's. Only the data source may differ (hub or a local folder, see `data.py`), and the
reference code's settings for generate-until tasks are applied on top (see `paper_settings.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cactus_bench.paper import PAPER


@dataclass(frozen=True)
class TaskSpec:
    """One task: which lm-eval task it is and which of its metrics is the headline score."""

    name: str  # our name (run.py's task=...)
    lm_eval_task: str  # lm-eval's task name
    lm_eval_yaml: str  # that task's YAML, relative to lm_eval/tasks/
    score_name: str  # headline metric key in lm-eval's "metric,filter" form
    description: str


TASK_SPECS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="gsm8k",
            lm_eval_task="gsm8k",
            lm_eval_yaml="gsm8k/gsm8k.yaml",
            score_name="exact_match,strict-match",  # the paper's Table 1 GSM8K column
            description="GSM8K test (1,319), 5-shot, exact match of the '#### N' answer",
        ),
        TaskSpec(
            name="ifeval",
            lm_eval_task="ifeval",
            lm_eval_yaml="ifeval/ifeval.yaml",
            # The paper does not say which IFEval metric it reports; all four are recorded.
            score_name="prompt_level_strict_acc,none",
            description="IFEval (541 prompts), verifiable instructions, 0-shot",
        ),
        TaskSpec(
            name="gpqa",
            # ASSUMPTION: the paper only says "GPQA". Its score must come from generated text
            # (log-likelihood tasks never decode), so we use lm-eval's generative zero-shot CoT
            # variant on the diamond subset.
            lm_eval_task="gpqa_diamond_cot_zeroshot",
            lm_eval_yaml="gpqa/cot_zeroshot/gpqa_diamond_cot_zeroshot.yaml",
            score_name="exact_match,strict-match",
            description="GPQA diamond (198), zero-shot chain of thought, 'The answer is (X)'",
        ),
        TaskSpec(
            name="demo",
            # lm-eval's IFEval task (its checkers and four metrics) on ~20 prompts written for
            # this project: the offline default, meaningful for a 135M chat model.
            lm_eval_task="cactus_demo",
            lm_eval_yaml="ifeval/ifeval.yaml",
            score_name="prompt_level_strict_acc,none",
            description="20 IFEval-style prompts shipped with cactus-bench, scored by IFEval",
        ),
    )
}
TASK_NAMES: tuple[str, ...] = tuple(TASK_SPECS)

DEMO_PROMPTS_PATH = Path(__file__).with_name("demo_prompts.jsonl")

# The reference code's generation settings for every generate-until task (its --gen-kwargs
# default), from the one source cactus_bench.paper.
PAPER_GEN_KWARGS: dict[str, object] = {
    "do_sample": True,
    "temperature": PAPER.temperature,
    "top_p": PAPER.top_p,
    "top_k": PAPER.top_k,
}
DEFAULT_MAX_GEN_TOKS = PAPER.max_new_tokens

# The reference removes newline stop strings (a reasoning model writes many newlines before it
# answers) and adds the end-of-turn markers of the chat families it runs.
NEWLINE_STOPS = ("\n", "\n\n", "\n\n\n", "\n\n\n\n")
CHAT_END_TOKENS = ("<|eot_id|>", "</s>", "<eos>", "<|im_end|>")

# How an unfinished reasoning block (the budget ran out inside `<think>`) is scored:
# "paper": the reference code's filter, which removes the tag and scores the text after it;
# "strict": this project's stricter choice, which removes everything from the open tag on.
THINK_FILTERS = ("paper", "strict")


def get_spec(task: str) -> TaskSpec:
    """The spec of `task`, or a one-line ValueError listing the known names."""
    if task not in TASK_SPECS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASK_NAMES)}")
    return TASK_SPECS[task]
