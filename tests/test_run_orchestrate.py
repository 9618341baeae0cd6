"""One run (cactus_bench.run) on the tiny in-memory pair: rows, records, resume, errors, baselines.

In-process (no subprocess): each run decodes 2 demo prompts of at most 8 tokens.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers.runs import csv_rows, tiny_conf

from cactus_bench.run import (
    ConfigError,
    build_identity,
    format_outcome,
    orchestrate,
    run,
)
from cactus_bench.store import MEASUREMENT_COLUMNS, ResultStore

REPO = Path(__file__).resolve().parents[1]


def test_run_writes_one_row_and_records_then_resume_skips(tmp_path, capsys):
    conf = tiny_conf(tmp_path, "sampler=cactus", "delta=0.5")
    outcome = run(conf)
    assert outcome.status == "ok"
    assert outcome.csv_path == tmp_path / "results" / "runs.csv"
    (row,) = csv_rows(outcome.csv_path)
    assert (row["status"], row["sampler"], row["delta"], row["m"]) == ("ok", "cactus", "0.5", "3")
    assert (row["model_pair"], row["task"], row["n_prompts"]) == ("tiny_random", "demo", "2")
    assert row["config_hash"] == outcome.config_hash and row["run_id"] == outcome.run_id
    for column in (
        "score",
        "al",
        "accept_rate",
        "tokens_per_s_spec",
        "tokens_per_s_baseline",
        "speedup_tokens",
        "speedup_walltime",
        "git_sha",
        "torch_version",
        "device_name",
    ):
        assert row[column] != "", column
    assert 0 <= float(row["al"]) <= 3
    assert row["baseline_mode"] == "interleave" and row["divergence"] == ""
    records = [
        json.loads(line)
        for line in (tmp_path / "results" / "runs.records.jsonl").read_text().splitlines()
    ]
    assert sorted((r["arm"], r["request_index"]) for r in records) == [
        ("baseline", 0),
        ("baseline", 1),
        ("spec", 0),
        ("spec", 1),
    ]
    assert all(r["run_id"] == outcome.run_id for r in records)
    table = format_outcome(outcome)
    for label in ("score", "AL", "acceptance rate", "tokens/s", "speedup", str(outcome.csv_path)):
        assert label in table

    # Same config again: skipped before any model loads; the CSV keeps its single row.
    again = run(tiny_conf(tmp_path, "sampler=cactus", "delta=0.5"))
    assert (again.status, again.config_hash) == ("skipped", outcome.config_hash)
    assert "skip" in capsys.readouterr().out
    assert len(csv_rows(outcome.csv_path)) == 1
    # force=true reruns it; a different delta is a different run.
    assert run(tiny_conf(tmp_path, "sampler=cactus", "delta=0.5", "force=true")).status == "ok"
    assert len(csv_rows(outcome.csv_path)) == 2
    assert not ResultStore(outcome.csv_path).has_finished(
        build_identity(tiny_conf(tmp_path, "delta=0.25"))[0].config_hash
    )


def test_failed_run_appends_error_row_and_reraises(tmp_path, monkeypatch):
    # A missing data folder fails before any model loads (preflight), leaving no row at all.
    conf = tiny_conf(tmp_path, "sampler=sps", f"data_dir={tmp_path / 'no-such-folder'}")
    with pytest.raises(Exception, match="no-such-folder"):
        run(conf)
    assert not (tmp_path / "results" / "runs.csv").exists()

    def fails(identity, rule):  # a failure while measuring leaves an error row
        raise RuntimeError("decoding failed: no-such-kernel\nsecond line")

    monkeypatch.setattr(orchestrate, "measure", fails)
    with pytest.raises(RuntimeError, match="no-such-kernel"):
        run(tiny_conf(tmp_path, "sampler=sps"))
    (row,) = csv_rows(tmp_path / "results" / "runs.csv")
    assert row["status"] == "error"
    assert "no-such-kernel" in row["error"] and "\n" not in row["error"]
    assert all(row[column] == "" for column in MEASUREMENT_COLUMNS)  # no stale numbers
    assert row["sampler"] == "sps" and row["config_hash"] != ""
    # An errored run is not finished: the same config runs again.
    assert not ResultStore(tmp_path / "results" / "runs.csv").has_finished(row["config_hash"])


def test_interrupted_run_leaves_an_error_row(tmp_path, monkeypatch):
    def interrupted(identity, rule):
        raise KeyboardInterrupt

    monkeypatch.setattr(orchestrate, "measure", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(tiny_conf(tmp_path, "sampler=sps"))
    (row,) = csv_rows(tmp_path / "results" / "runs.csv")
    assert (row["status"], row["error"]) == ("error", "KeyboardInterrupt: interrupted")


def test_verifier_run_feeds_the_cached_baseline(tmp_path, capsys):
    verifier = run(tiny_conf(tmp_path, "sampler=verifier", "baseline=cached"))
    row = verifier.row
    assert row["sampler"] == "verifier" and row["m"] is None and row["drafter_id"] is None
    assert row["al"] is None and row["speedup_tokens"] is None  # no speculation, no self-comparison
    assert row["baseline_mode"] == "none"
    assert list((tmp_path / "results" / "baselines").glob("*.json"))  # its records, cached

    spec = run(tiny_conf(tmp_path, "sampler=sps", "baseline=cached"))
    assert "reusing the cached verifier-only decode" in capsys.readouterr().out
    assert spec.row["baseline_mode"] == "cached"
    assert spec.row["speedup_tokens"] is not None
    assert spec.row["tokens_per_s_baseline"] == pytest.approx(verifier.row["tokens_per_s_spec"])


def test_cached_baseline_is_decoded_once_when_missing(tmp_path, capsys):
    first = run(tiny_conf(tmp_path, "sampler=tas", "baseline=cached"))
    assert "decoding it once" in capsys.readouterr().out
    second = run(tiny_conf(tmp_path, "sampler=sps", "baseline=cached"))
    assert "reusing" in capsys.readouterr().out
    assert second.row["tokens_per_s_baseline"] == pytest.approx(first.row["tokens_per_s_baseline"])


def test_vllm_backend_says_what_it_needs(tmp_path):
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"make setup-vllm"):
            run(tiny_conf(tmp_path, "backend=vllm"))
        assert not (tmp_path / "results" / "runs.csv").exists()  # nothing ran, no row
    else:
        pytest.skip("vllm is installed here")


def test_experiment_name_picks_the_csv(tmp_path):
    conf = tiny_conf(tmp_path, "experiment_name=my_study", "sampler=greedy", "temperature=0")
    outcome = run(conf)
    assert outcome.csv_path.name == "my_study.csv"
    assert csv_rows(outcome.csv_path)[0]["experiment"] == "my_study"


@pytest.mark.slow
def test_wandb_logger_runs_offline_without_api_key(tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    outcome = run(tiny_conf(tmp_path, "logger=wandb", "sampler=sps"))
    assert outcome.status == "ok"
    assert "offline" in capsys.readouterr().out  # says so
    assert list((tmp_path / "results" / "wandb").glob("offline-run-*"))
    assert csv_rows(outcome.csv_path)[0]["status"] == "ok"  # the CSV stays the source of truth
    assert "WANDB_MODE" not in os.environ  # nothing leaks into later runs of a sweep


def test_a_config_another_process_is_running_is_skipped_not_decoded_twice(tmp_path, capsys):
    import subprocess
    import sys
    import textwrap

    from cactus_bench.run.resume import run_journal

    conf = tiny_conf(tmp_path, "sampler=sps")
    identity, _ = build_identity(conf)
    claim = Path(str(run_journal(identity).path) + ".claim")
    claim.parent.mkdir(parents=True, exist_ok=True)
    # another process holds the claim, as a second worker on the same sweep would
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from filelock import FileLock
                lock = FileLock({str(claim)!r}); lock.acquire()
                print("held", flush=True); sys.stdin.readline()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        outcome = orchestrate.run(conf)
        assert outcome.status == "skipped"
        assert "running in another process" in capsys.readouterr().out
        assert not (tmp_path / "results" / "runs.csv").exists()  # nothing decoded, no row
    finally:
        holder.communicate("\n", timeout=30)
    # the holder is gone: the same config now runs and lands its row
    assert orchestrate.run(conf).status == "ok"
