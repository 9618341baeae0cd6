"""`<think>` scoring on real Qwen3 outputs: the real tokenizer and chat template, GSM8K through
lm-eval's own filters, a budget that runs out inside the reasoning block.

The paper's filter (default) removes the unfinished block's tag and scores its text, so GSM8K's
flexible extract finds the number the model reached while thinking; the strict one scores
nothing of it. A finished answer scores the same under both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.tasks import OneAtATime, use_private_caches

from cactus_bench.engine import RequestRecord
from cactus_bench.tasks import evaluate_task

SHARED = Path(__file__).resolve().parents[2] / "shared"
QWEN3, DATA = SHARED / "tokenizers" / "qwen3", SHARED / "data"
LIMIT, BUDGET = 2, 48  # new tokens: the budget runs out in the middle of the reasoning
pytestmark = [
    pytest.mark.slow,  # lm-eval builds GSM8K for each case: ~10 s each
    pytest.mark.skipif(
        not ((QWEN3 / "tokenizer.json").is_file() and (DATA / "gsm8k" / "test.jsonl").is_file()),
        reason="needs ../shared/tokenizers/qwen3 and ../shared/data/gsm8k",
    ),
]


@pytest.fixture(scope="module")
def qwen3():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN3))


@pytest.fixture(autouse=True)
def private_caches(tmp_path, monkeypatch):
    use_private_caches(tmp_path, monkeypatch)


def gold_answers() -> list[str]:
    with open(DATA / "gsm8k" / "test.jsonl") as handle:
        rows = [json.loads(next(handle)) for _ in range(LIMIT)]
    return [row["answer"].split("####")[-1].strip().replace(",", "") for row in rows]


class Qwen3Thinker(OneAtATime):
    """Answers like Qwen3 in thinking mode: the right number early in a long reasoning block,
    then `#### N`. Emits at most max_new_tokens of Qwen3's token ids and decodes them as the
    engine does (skip_special_tokens=True), so a short budget cuts the block open."""

    num_draft_tokens, sampler_name = 0, None

    def __init__(self, tokenizer, answers):
        self.tokenizer, self.answers, self.prompts = tokenizer, answers, []

    def generate(self, prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None):
        prompt = self.tokenizer.decode(prompt_ids)
        self.prompts.append(prompt)
        answer = self.answers[len(self.prompts) - 1]
        thinking = f"Okay, the total is {answer}. " + "Let me double-check that carefully. " * 30
        response = f"<think>\n{thinking}\n</think>\n\nThe answer is #### {answer}<|im_end|>"
        ids = self.tokenizer.encode(response)
        out = ids[:max_new_tokens]
        return RequestRecord(
            prompt_ids=list(prompt_ids),
            output_ids=out,
            text=self.tokenizer.decode(out, skip_special_tokens=True),
            stop_reason="length" if len(out) < len(ids) else "eos",
            seed=seed,
        )


def score(qwen3, think_filter: str, budget: int):
    decoder = Qwen3Thinker(qwen3, gold_answers())
    result = evaluate_task(
        "gsm8k",
        decoder,
        tokenizer=qwen3,
        chat_template_kwargs={"enable_thinking": True},
        data_dir=DATA,
        limit=LIMIT,
        max_gen_toks=budget,
        show_progress=False,
        think_filter=think_filter,
    )
    return result, decoder


@pytest.mark.parametrize(("think_filter", "flexible"), [("paper", 1.0), ("strict", 0.0)])
def test_budget_cut_reasoning_scores_as_the_filter_says(qwen3, think_filter, flexible):
    result, decoder = score(qwen3, think_filter, BUDGET)
    # The real template opens the assistant turn and leaves <think> to the model (thinking on).
    assert all(p.endswith("<|im_start|>assistant\n") for p in decoder.prompts)
    texts = [r.text for r in result.records]
    assert all(r.stop_reason == "length" for r in result.records)
    assert all(r.text.startswith("<think>\n") and "</think>" not in r.text for r in result.records)
    assert result.metrics["exact_match,strict-match"] == 0.0  # no "#### N" before the cut
    assert result.metrics["exact_match,flexible-extract"] == flexible, texts


@pytest.mark.parametrize("think_filter", ["paper", "strict"])
def test_a_finished_answer_scores_alike_under_both_filters(qwen3, think_filter):
    result, _ = score(qwen3, think_filter, 4096)
    assert all(r.stop_reason == "eos" for r in result.records)
    assert result.metrics["exact_match,strict-match"] == 1.0
    assert result.metrics["exact_match,flexible-extract"] == 1.0
