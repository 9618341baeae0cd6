"""evaluate_task(..., repeats=k) and run.py's `repeats=k`: every prompt decoded k times with
distinct seeds (both arms, paired by seed), scored by lm-eval each time, scores averaged per
prompt; the row carries the per-prompt scores and the intervals. No model and no shared data
for the scripted part; the tiny random pair for the end-to-end run."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from helpers.runs import csv_rows, tiny_conf
from helpers.tasks import GPQA_ROWS, GSM8K_TEST, ScriptedDecoder, gsm8k_folder, use_private_caches

from cactus_bench.models.tiny import make_tiny_tokenizer
from cactus_bench.run import ConfigError, build_identity, run, run_conf_from_dict, validate
from cactus_bench.store.intervals import interval_column_names
from cactus_bench.tasks import evaluate_task
from cactus_bench.tasks.evaluate import repeat_seed
from cactus_bench.tasks.lm import request_seed


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(autouse=True)
def private_caches(tmp_path, monkeypatch):
    use_private_caches(tmp_path, monkeypatch)


def test_repeats_score_each_prompt_k_times_and_average_per_prompt(tmp_path, tokenizer):
    seen = Counter()

    def respond(prompt):  # the first question is answered right only on its first decode
        question = prompt.rsplit("Question: ", 1)[1].split("\n")[0]
        seen[question] += 1
        first = next(iter(GSM8K_TEST))
        return "#### 0" if question == first and seen[question] > 1 else GSM8K_TEST[question][1]

    log = []
    res = evaluate_task(
        "gsm8k",
        ScriptedDecoder(tokenizer, respond, log=log),
        baseline=ScriptedDecoder(tokenizer, respond, name="baseline", log=log),
        tokenizer=tokenizer,
        data_dir=gsm8k_folder(tmp_path),
        repeats=2,
        show_progress=False,
    )
    # strict match per prompt (test_tasks.py): right, missing, right, wrong. The scripted
    # baseline also answers, so the first question's second and later calls are wrong.
    assert res.repeats == 2 and res.n_samples == 4
    assert res.scores_by_prompt == [0.5, 0.0, 1.0, 0.0]
    assert res.score == pytest.approx(1.5 / 4) == pytest.approx(sum(res.scores_by_prompt) / 4)
    assert res.metrics["exact_match,strict-match"] == res.score
    assert not [k for k in res.metrics if "_stderr" in k]  # one repeat's stderr would mislead
    assert len(res.records) == len(res.baseline_records) == 8
    assert [s["repeat"] for s in res.samples if s["filter"] == "strict-match"] == [0] * 4 + [1] * 4
    spec_calls = [c for c in log if c["arm"] == "spec"]
    base_calls = [c for c in log if c["arm"] == "baseline"]
    assert [c["prompt"] for c in spec_calls[:4]] == [c["prompt"] for c in spec_calls[4:]]
    assert [c["seed"] for c in spec_calls] == [c["seed"] for c in base_calls]  # paired by seed
    assert len({c["seed"] for c in spec_calls}) == 8  # distinct across repeats
    assert [c["seed"] for c in spec_calls[:4]] == [request_seed(1234, i) for i in range(4)]


def test_repeats_see_the_same_shuffled_gpqa_choices(tmp_path, tokenizer, monkeypatch):
    from cactus_bench.tasks import data as task_data

    (tmp_path / "gpqa").mkdir()
    (tmp_path / "gpqa/dataset.zip").write_bytes(b"stand-in")
    monkeypatch.setattr(task_data, "read_gpqa_diamond", lambda path, password: GPQA_ROWS)
    decoder = ScriptedDecoder(tokenizer, lambda prompt: "The answer is (A)")
    res = evaluate_task(
        "gpqa", decoder, tokenizer=tokenizer, data_dir=tmp_path, repeats=3, show_progress=False
    )
    prompts = [call["prompt"] for call in decoder.log]
    assert len(prompts) == 12 and prompts[:4] == prompts[4:8] == prompts[8:]
    assert all(v in (0.0, 1.0) for v in res.scores_by_prompt)  # same prompt, same answer
    assert res.score == pytest.approx(sum(res.scores_by_prompt) / 4)


def test_repeat_seeds_keep_repeat_zero_and_never_collide():
    assert repeat_seed(1234, 0) == 1234
    seeds = {request_seed(repeat_seed(7, r), i) for r in range(50) for i in range(2000)}
    assert len(seeds) == 50 * 2000


def test_bad_repeats_are_refused_in_one_line(tokenizer):
    with pytest.raises(ValueError, match="repeats must be an integer >= 1; got 0"):
        evaluate_task("demo", ScriptedDecoder(tokenizer, str), tokenizer=tokenizer, repeats=0)
    base = {"model": {"name": "x", "drafter": "d", "verifier": "v"}, "task": {"name": "demo"}}
    base |= {"sampler": {"name": "sps"}, "backend": {}, "logger": {}}
    with pytest.raises(ConfigError, match="repeats must be >= 1") as caught:
        validate(run_conf_from_dict({**base, "repeats": 0}))
    assert "\n" not in str(caught.value)


def test_repeats_enter_the_config_hash_only_when_not_one(tmp_path):
    def identity(*overrides):
        return build_identity(tiny_conf(tmp_path, "sampler=sps", *overrides))[0]

    once = identity()
    assert "repeats" not in once.hash_fields  # repeats=1 rows keep their earlier hash
    assert once.config_hash == identity("repeats=1").config_hash
    twice = identity("repeats=2")
    assert twice.hash_fields["repeats"] == 2 and twice.config_hash != once.config_hash


@pytest.mark.slow
def test_a_run_with_repeats_writes_per_prompt_scores_and_intervals(tmp_path):
    conf = tiny_conf(tmp_path, "sampler=cactus", "delta=0.5", "repeats=2", "limit=3")
    validate(conf)
    outcome = run(conf)
    (row,) = csv_rows(outcome.csv_path)
    assert (row["repeats"], row["n_prompts"], row["ci_resamples"]) == ("2", "3", "2000")
    per_prompt = json.loads(row["score_by_prompt"])
    assert len(per_prompt) == 3 and all(2 * v in (0, 1, 2) for v in per_prompt)
    assert float(row["score"]) == pytest.approx(sum(per_prompt) / 3)
    for name in interval_column_names():
        assert row[name] != "", name
    for stat in ("score", "al", "tokens_per_step", "speedup_tokens", "speedup_walltime"):
        assert float(row[f"{stat}_ci_low"]) <= float(row[f"{stat}_ci_high"]), stat
    assert 0.0 <= float(row["score_ci_low"]) and float(row["score_ci_high"]) <= 1.0
    records = [
        json.loads(line)
        for line in (tmp_path / "results" / "runs.records.jsonl").read_text().splitlines()
    ]
    spec = [r for r in records if r["arm"] == "spec"]
    base = [r for r in records if r["arm"] == "baseline"]
    assert len(spec) == len(base) == 6
    assert [r["prompt_ids"] for r in spec[:3]] == [r["prompt_ids"] for r in spec[3:]]
    assert [r["seed"] for r in spec] == [r["seed"] for r in base] and len(
        {r["seed"] for r in spec}
    ) == 6
    # a verifier-only row on the same prompts pairs with it (same prompts_hash)
    verifier = run(tiny_conf(tmp_path, "sampler=verifier", "repeats=2", "limit=3"))
    assert verifier.row["prompts_hash"] == row["prompts_hash"]
    assert verifier.row["al_ci_low"] is None and verifier.row["score_ci_low"] is not None
