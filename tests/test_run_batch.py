"""batch > 1 through the whole run path: config checks, the row's columns, resume, and the
scores and tokens of a batched run against the same run at batch 1 (tiny random pair, fp32)."""

from __future__ import annotations

import json

import pytest
from helpers.runs import compose_tiny, csv_rows, tiny_conf

from cactus_bench.run import ConfigError, build_identity, ignored_settings, run, validate
from cactus_bench.store.summarise import machine_time


def _records(results, arm: str) -> list[dict]:
    lines = (results / "runs.records.jsonl").read_text().splitlines()
    kept = [json.loads(line) for line in lines]
    return sorted(
        (r for r in kept if r["arm"] == arm), key=lambda r: (r["run_id"], r["request_index"])
    )


def test_batch_1_keeps_every_hash_and_baseline_key(tmp_path):
    one, many = (build_identity(tiny_conf(tmp_path, f"batch={b}"))[0] for b in (1, 4))
    assert "batch" not in one.hash_fields and many.hash_fields["batch"] == 4
    assert one.columns("r")["batch"] == 1
    assert one.baseline_key([[1]], "cpu") != many.baseline_key([[1]], "cpu")
    assert one.config_hash == build_identity(tiny_conf(tmp_path))[0].config_hash


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["batch=0"], "batch must be >= 1 (got 0)"),
        (["batch=2", "engine.fast=off"], "batch=2 needs the fast forward"),
    ],
)
def test_a_batch_that_cannot_run_fails_in_one_line(tmp_path, overrides, expected):
    with pytest.raises(ConfigError) as caught:
        validate(compose_tiny(tmp_path, *overrides))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_vllm_batches_with_its_own_scheduler_whatever_the_hf_forward(tmp_path):
    conf = compose_tiny(tmp_path, "batch=2", "backend=vllm", "engine.fast=off")
    assert validate(conf).rule == "cactus" and conf.batch == 2


def test_a_batch_larger_than_the_prompts_says_what_happens(tmp_path):
    conf = tiny_conf(tmp_path, "batch=8")  # limit=2
    (line,) = ignored_settings(conf, validate(conf))
    assert "batch=8 but limit=2 prompts, so at most 2 decode at once" in line


@pytest.mark.slow
def test_a_batched_run_scores_and_decodes_as_at_batch_1_and_resumes(tmp_path, monkeypatch):
    """Greedy fp32: the batched run's texts, scores and acceptance equal batch 1's; the row
    carries the batch, throughput and latency columns; a rerun replays the journal."""
    base = (
        "sampler=cactus",
        "temperature=0",
        "limit=4",
        "max_new_tokens=12",
        "model.dtype=float32",
    )
    one = run(tiny_conf(tmp_path, *base))
    four = run(tiny_conf(tmp_path, *base, "batch=3"))
    rows = {row["batch"]: row for row in csv_rows(one.csv_path)}
    assert set(rows) == {"1", "3"}
    for column in ("score", "al", "generated_tokens", "draft_tokens_accepted", "prompts_hash"):
        assert rows["1"][column] == rows["3"][column], column
    for column in ("tokens_per_s_spec_ci_low", "tpot_median_s", "tpot_p90_s_ci_high"):
        assert rows["3"][column] != "", column
    assert float(rows["3"]["tpot_median_s"]) <= float(rows["3"]["tpot_p90_s"])
    results = tmp_path / "results"
    spec = _records(results, "spec")
    by_run = {r: [x for x in spec if x["run_id"] == r] for r in (one.run_id, four.run_id)}
    assert [x["output_ids"] for x in by_run[one.run_id]] == [
        x["output_ids"] for x in by_run[four.run_id]
    ]
    # two waves: three requests at once, then the fourth alone
    assert [x["batch_size"] for x in by_run[four.run_id]] == [3, 3, 3, 1]
    shares = sum(machine_time(x) for x in by_run[four.run_id])
    assert shares == pytest.approx(float(rows["3"]["wall_time_spec_s"]))
    assert rows["3"]["waves"] == "2" and rows["1"]["waves"] == "4"
    steps = [json.loads(line) for line in (results / "runs.steps.jsonl").read_text().splitlines()]
    assert sorted(s["arm"] for s in steps if s["run_id"] == four.run_id) == ["baseline", "spec"]
    (spec_steps,) = [s for s in steps if s["run_id"] == four.run_id and s["arm"] == "spec"]
    decode = [i for i, kind in enumerate(spec_steps["kind"]) if kind == "decode"]
    assert max(spec_steps["rows"][i] for i in decode) == 3  # three requests at once
    assert sum(spec_steps["accepted"]) == int(rows["3"]["draft_tokens_accepted"])


@pytest.mark.slow
def test_an_interrupted_batched_run_resumes_from_its_journal(tmp_path, monkeypatch, capsys):
    """Each request of a batch is journaled as it ends: a run killed after two requests replays
    them and decodes only the rest."""
    from cactus_bench.engine import batched

    conf = tiny_conf(tmp_path, "sampler=sps", "limit=4", "batch=2", "baseline=none")
    real = batched.generate_batch

    def killed_after_two(decoder, requests, batch, on_finish=None):
        if on_finish is None:  # the warm-up: not journaled, not killed
            return real(decoder, requests, batch)
        finished = []

        def finish(index, record):
            on_finish(index, record)
            finished.append(index)
            if len(finished) == 2:
                raise RuntimeError("killed")

        return real(decoder, requests, batch, finish)

    monkeypatch.setattr(batched, "generate_batch", killed_after_two)
    with pytest.raises(RuntimeError, match="killed"):
        run(conf)
    monkeypatch.setattr(batched, "generate_batch", real)
    capsys.readouterr()
    assert run(conf).status == "ok"
    assert "resume: 2 requests replayed from the journal, 2 decoded" in capsys.readouterr().out
