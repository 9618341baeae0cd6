"""Scorer checks: hand-written responses, right and wrong, scored through lm-eval's own GSM8K,
IFEval and GPQA task definitions, filters and metrics. A `<think>` block never reaches a scorer.

The real lm-eval tasks run on small hand-written data folders (laid out like shared/data) with
a decoder that answers from a script, so every number below is lm-eval's. No model and no
shared data needed.
"""

from __future__ import annotations

import random
import re

import datasets
import pytest
from helpers.tasks import (
    GPQA_ROWS,
    GSM8K_TEST,
    ScriptedDecoder,
    gsm8k_folder,
    use_private_caches,
    write_jsonl,
)

from cactus_bench.engine import SamplingParams
from cactus_bench.models.tiny import make_tiny_tokenizer
from cactus_bench.tasks import data as task_data
from cactus_bench.tasks import evaluate_task
from cactus_bench.tasks.paper_settings import paper_until, strip_thinking


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(autouse=True)
def private_caches(tmp_path, monkeypatch):
    use_private_caches(tmp_path, monkeypatch)


# ---- <think> stripping and stop strings ---------------------------------------------------------
@pytest.mark.parametrize(
    ("response", "paper", "strict"),
    [
        ("<think>a\nb</think>\n\nThe answer is 4", "The answer is 4", "The answer is 4"),
        ("no reasoning here", "no reasoning here", "no reasoning here"),
        ("opened in the prompt, #### 9</think>\n#### 4", "#### 4", "#### 4"),
        ("<think>x</think>A<think>y</think>B", "AB", "AB"),
        # unfinished: the paper's filter removes the tag only; the strict one all of it
        ("<think>ran out of tokens, #### 9", "ran out of tokens, #### 9", ""),
        (
            "Answer first <think>then unfinished #### 9",
            "Answer first then unfinished #### 9",
            "Answer first ",
        ),
    ],
)
def test_strip_thinking(response, paper, strict):
    assert strip_thinking(response) == paper  # the default is the paper's
    assert strip_thinking(response, "strict") == strict


def test_paper_until_drops_newlines_and_adds_chat_end_tokens():
    assert paper_until(["Question:", "\n\n", "\n"]) == [
        "Question:",
        "<|eot_id|>",
        "</s>",
        "<eos>",
        "<|im_end|>",
    ]
    assert paper_until([]) == ["<|eot_id|>", "</s>", "<eos>", "<|im_end|>"]
    assert paper_until("\n") == ["<|eot_id|>", "</s>", "<eos>", "<|im_end|>"]
    assert paper_until(["</s>"]).count("</s>") == 1


# ---- GSM8K: answer extraction through lm-eval's filters -----------------------------------------


def test_gsm8k_scores_through_lm_eval_filters(tmp_path, tokenizer):
    def respond(prompt):  # the question being asked is the last one in the 5-shot prompt
        question = prompt.rsplit("Question: ", 1)[1].split("\n")[0]
        return GSM8K_TEST[question][1]

    decoder = ScriptedDecoder(tokenizer, respond)
    res = evaluate_task(
        "gsm8k", decoder, tokenizer=tokenizer, data_dir=gsm8k_folder(tmp_path), show_progress=False
    )
    # strict "#### N": right, missing, right after the <think> decoy is stripped, wrong (the
    # right answer only inside <think>). flexible (last number): right, right, right, wrong.
    assert res.metrics["exact_match,strict-match"] == pytest.approx(2 / 4)
    assert res.metrics["exact_match,flexible-extract"] == pytest.approx(3 / 4)
    assert res.metrics["exact_match,flexible-extract-last"] == pytest.approx(3 / 4)
    assert (res.score_name, res.score, res.n_samples) == ("exact_match,strict-match", 0.5, 4)
    assert len(res.records) == 4 and res.baseline_records == []
    strict = [s for s in res.samples if s["filter"] == "strict-match"]
    assert [s["filtered_resps"][0] for s in strict] == ["12", "[invalid]", "2,000", "8"]
    # The prompt: 5-shot examples, chat template, paper's sampling and stops.
    call = decoder.log[0]
    assert call["prompt"].startswith("<|im_start|>user\n") and call["prompt"].count("####") == 5
    assert call["sampling"] == SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
    assert call["max_new_tokens"] == 4096 and "\n" not in call["stop"]
    assert set(call["stop"]) >= {"Question:", "<|im_end|>", "<|eot_id|>", "</s>", "<eos>"}


# ---- IFEval: a few instructions through lm-eval's checkers ---------------------------------------
IFEVAL_ROWS = [  # (prompt, instructions, kwargs, hand-written response)
    (
        "Greet me without commas.",
        ["punctuation:no_comma"],
        [{}],
        "<think>Hmm, well, a greeting</think>Hello there my friend",
    ),  # passes once stripped
    ("Greet me in lowercase.", ["change_case:english_lowercase"], [{}], "HELLO THERE"),
    (
        "Describe a cat in under 10 words.",
        ["length_constraints:number_words", "keywords:existence"],
        [{"num_words": 10, "relation": "less than"}, {"keywords": ["cat"]}],
        "<think>A cat is small and",
    ),  # unclosed: the paper's filter scores "A cat is small and" (passes); strict scores ""
]


@pytest.mark.parametrize(
    ("think_filter", "prompt_level", "inst_level", "unfinished"),
    [("paper", 2 / 3, 3 / 4, "A cat is small and"), ("strict", 1 / 3, 1 / 4, "")],
)
def test_ifeval_scores_through_lm_eval_checkers(
    tmp_path, tokenizer, think_filter, prompt_level, inst_level, unfinished
):
    rows = [
        {"key": i, "prompt": p, "instruction_id_list": ids, "kwargs": kw}
        for i, (p, ids, kw, _) in enumerate(IFEVAL_ROWS)
    ]
    write_jsonl(tmp_path / "ifeval/input_data.jsonl", rows)
    responses = {p: r for p, _, _, r in IFEVAL_ROWS}

    def respond(prompt):
        return next(r for p, r in responses.items() if p in prompt)

    res = evaluate_task(
        "ifeval",
        ScriptedDecoder(tokenizer, respond),
        tokenizer=tokenizer,
        data_dir=tmp_path,
        show_progress=False,
        think_filter=think_filter,
    )
    assert res.metrics["prompt_level_strict_acc,none"] == pytest.approx(prompt_level)
    assert res.metrics["inst_level_strict_acc,none"] == pytest.approx(inst_level)
    assert res.metrics["prompt_level_loose_acc,none"] == pytest.approx(prompt_level)
    assert res.metrics["inst_level_loose_acc,none"] == pytest.approx(inst_level)
    assert res.score_name == "prompt_level_strict_acc,none"
    filtered = [s["filtered_resps"][0] for s in res.samples][::2]
    assert filtered == ["Hello there my friend", unfinished]


# ---- GPQA: letter extraction, choice shuffling, password ----------------------------------------


def letter_of(prompt, answer):
    return re.search(rf"\(([A-D])\) {re.escape(answer)}\n", prompt).group(1)


def run_gpqa(tmp_path, tokenizer, monkeypatch, respond, seed=1234):
    (tmp_path / "gpqa").mkdir(exist_ok=True)
    (tmp_path / "gpqa/dataset.zip").write_bytes(b"stand-in: rows come from read_gpqa_diamond")
    monkeypatch.setattr(task_data, "read_gpqa_diamond", lambda path, password: GPQA_ROWS)
    decoder = ScriptedDecoder(tokenizer, respond)
    res = evaluate_task(
        "gpqa", decoder, tokenizer=tokenizer, data_dir=tmp_path, seed=seed, show_progress=False
    )
    return res, decoder


def test_gpqa_letter_extraction(tmp_path, tokenizer, monkeypatch):
    def respond(prompt):
        i = int(re.search(r"number (\d)", prompt).group(1))
        right = letter_of(prompt, f"value {i}")
        wrong = letter_of(prompt, f"other {i}a")
        return [
            f"Let me think. The answer is ({right}).",
            f"The answer is ({wrong}).",
            f"<think>The answer is ({right}).</think>The answer is ({wrong}).",
            f"<think>maybe ({wrong})</think>So, ({right}) it is.",
        ][i]

    res, _ = run_gpqa(tmp_path, tokenizer, monkeypatch, respond)
    assert res.lm_eval_task == "gpqa_diamond_cot_zeroshot"
    assert res.metrics["exact_match,strict-match"] == pytest.approx(1 / 4)  # only row 0
    assert res.metrics["exact_match,flexible-extract"] == pytest.approx(2 / 4)  # rows 0 and 3


def test_gpqa_choices_follow_the_run_seed(tmp_path, tokenizer, monkeypatch):
    def targets(seed):
        res, _ = run_gpqa(tmp_path, tokenizer, monkeypatch, lambda p: "The answer is (A).", seed)
        return [s["target"] for s in res.samples if s["filter"] == "strict-match"]

    first, again, other = targets(1234), targets(1234), targets(7)
    assert first == again and first != other
    # Seed 1234 reproduces the reference: lm-eval's own shuffle after random.seed(0).
    from lm_eval.tasks.gpqa.cot_zeroshot.utils import process_docs

    random.seed(0)
    expected = process_docs(datasets.Dataset.from_list(GPQA_ROWS))["answer"]
    assert first == expected


def test_gpqa_wrong_password_is_one_clear_line():
    path = "/nonexistent.zip"
    with pytest.raises((ValueError, FileNotFoundError)):
        task_data.read_gpqa_diamond(path, "x")
    shared_zip = task_data.Path(__file__).resolve().parents[2] / "shared/data/gpqa/dataset.zip"
    if not shared_zip.is_file():
        pytest.skip(f"{shared_zip} absent: the real encrypted archive is needed")
    with pytest.raises(ValueError, match="password") as err:
        task_data.read_gpqa_diamond(shared_zip, "not-the-password")
    assert "\n" not in str(err.value)
