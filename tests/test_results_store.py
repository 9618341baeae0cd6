"""ResultStore: schema validation, resume, widening old files, concurrency and SIGKILL safety."""

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pandas as pd
import pytest

from cactus_bench.store import COLUMNS, ResultStore, config_hash, run_metadata


def make_row(index: int = 0, **overrides) -> dict:
    row = {
        "run_id": f"run-{index}",
        "config_hash": config_hash({"i": index}),
        "task": "demo",
        "sampler": "cactus",
        "delta": 0.5,
        "m": 4,
        "score": 0.25,
        "al": 1.5,
        "accept_rate_by_pos": [0.5, 0.25],
        "metrics_json": {"acc": 0.25, "note": "a, b"},
        "git_dirty": False,
        "status": "ok",
    }
    row.update(overrides)
    return row


def test_append_writes_header_then_rows_in_column_order(tmp_path):
    store = ResultStore(tmp_path / "runs.csv")
    store.append(make_row(0))
    store.append(make_row(1, delta=None, al=None))
    with open(store.csv_path, newline="") as handle:
        lines = list(csv.reader(handle))
    assert lines[0] == COLUMNS
    assert len(lines) == 3 and all(len(cells) == len(COLUMNS) for cells in lines)
    frame = store.read()
    assert list(frame["delta"].isna()) == [False, True]  # missing is empty, never 0
    assert frame.loc[0, "al"] == 1.5 and pd.isna(frame.loc[1, "al"])
    assert frame.loc[0, "metrics_json"] == '{"acc":0.25,"note":"a, b"}'
    assert frame.loc[0, "git_dirty"] == False  # noqa: E712 (pandas nullable boolean)
    assert frame["m"].dtype == "Int64"


def test_unknown_column_and_bad_values_are_rejected_before_writing(tmp_path):
    store = ResultStore(tmp_path / "runs.csv")
    with pytest.raises(ValueError, match="unknown result column.*'dleta'"):
        store.append(make_row(dleta=0.5))
    with pytest.raises(ValueError, match="required column 'config_hash'"):
        store.append(make_row(config_hash=None))
    with pytest.raises(ValueError, match="wants an integer"):
        store.append(make_row(m=2.5))
    with pytest.raises(ValueError, match="fraction in"):
        store.append(make_row(score=91.7))
    with pytest.raises(ValueError, match="status must be one of"):
        store.append(make_row(status="done"))
    with pytest.raises(ValueError, match="stale numbers"):
        store.append(make_row(status="error", error="OOM"))  # still carries score and al
    assert not store.csv_path.exists()
    store.append(
        make_row(
            status="error",
            error="CUDA OOM\nat step 3",
            score=None,
            al=None,
            accept_rate_by_pos=None,
            metrics_json=None,
        )
    )
    assert store.read().loc[0, "error"] == "CUDA OOM at step 3"


def test_resume_sees_only_finished_rows(tmp_path):
    store = ResultStore(tmp_path / "runs.csv")
    assert store.finished_hashes() == set()
    store.append(make_row(0))
    store.append(
        make_row(
            1,
            status="error",
            error="boom",
            score=None,
            al=None,
            accept_rate_by_pos=None,
            metrics_json=None,
        )
    )
    assert store.finished_hashes() == {config_hash({"i": 0})}
    assert store.has_finished(config_hash({"i": 0}))
    assert not store.has_finished(config_hash({"i": 1}))


def test_an_older_file_is_widened_to_the_current_columns(tmp_path):
    path = tmp_path / "old.csv"
    old_columns = [c for c in COLUMNS if c not in ("python_version", "sampler_time_s")]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(old_columns)
        writer.writerow(
            [
                "old-run"
                if c == "run_id"
                else "ok"
                if c == "status"
                else "h0"
                if c == "config_hash"
                else ""
                for c in old_columns
            ]
        )
    store = ResultStore(path)
    assert len(store.read()) == 1  # readable before any upgrade
    store.append(make_row(1, python_version="3.11.7"))
    frame = store.read()
    assert list(frame["run_id"]) == ["old-run", "run-1"]
    assert list(frame.columns[-2:]) == ["sampler_time_s", "python_version"]  # COLUMNS order
    assert frame.loc[1, "python_version"] == "3.11.7" and pd.isna(frame.loc[0, "python_version"])


def test_append_records_writes_jsonl_beside_the_csv(tmp_path):
    store = ResultStore(tmp_path / "sweep.csv")
    records = [{"output_ids": [1, 2], "accepted_per_step": [1]}, {"output_ids": []}]
    assert store.append_records("run-0", records) == 2
    lines = store.records_path.read_text().splitlines()
    assert store.records_path.name == "sweep.records.jsonl" and len(lines) == 2
    assert '"arm":"spec"' in lines[0] and '"request_index":1' in lines[1]


def test_a_file_that_is_not_a_results_csv_is_refused(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="does not look like a cactus-bench results CSV"):
        ResultStore(path).append(make_row())


def test_torn_tail_is_ignored_on_read_and_cut_on_append(tmp_path):
    store = ResultStore(tmp_path / "runs.csv")
    store.append(make_row(0))
    with open(store.csv_path, "a") as handle:
        handle.write("run-x,abc,2026-")  # what a crash mid-write could leave
    with pytest.warns(UserWarning, match="torn"):
        assert len(store.read()) == 1
    with pytest.warns(UserWarning, match="torn"):
        store.append(make_row(1))
    assert list(store.read()["run_id"]) == ["run-0", "run-1"]


def test_run_metadata_has_versions_and_device():
    meta = run_metadata("cpu")
    assert meta["device_name"].startswith("CPU: ")
    assert meta["torch_version"] and meta["timestamp"].endswith("+00:00")
    assert set(meta) <= set(COLUMNS)


def test_config_hash_is_canonical():
    assert config_hash({"delta": 1.0, "m": [1, 2]}) == config_hash({"m": (1, 2), "delta": 1})
    assert config_hash({"delta": 0.75}) != config_hash({"delta": 0.5})
    with pytest.raises(TypeError, match="OmegaConf.to_container"):
        config_hash({"x": object()})


APPEND_LOOP = textwrap.dedent("""
    import sys
    from cactus_bench.store import ResultStore
    store = ResultStore(sys.argv[1])
    for i in range(int(sys.argv[3])):
        store.append({"run_id": f"{sys.argv[2]}-{i}", "config_hash": f"{sys.argv[2]}{i}",
                      "task": "demo", "sampler": "sps", "status": "ok",
                      "metrics_json": {"text": "x" * 2000}, "error": None})
""")


def _spawn_appender(csv_path, tag: str, count: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", APPEND_LOOP, str(csv_path), tag, str(count)])


@pytest.mark.slow
def test_two_processes_appending_concurrently_keep_every_row(tmp_path):
    csv_path = tmp_path / "shared.csv"
    workers = [_spawn_appender(csv_path, tag, 150) for tag in ("a", "b")]
    assert [w.wait(timeout=300) for w in workers] == [0, 0]
    frame = ResultStore(csv_path).read()
    assert len(frame) == 300
    assert set(frame["run_id"]) == {f"{t}-{i}" for t in "ab" for i in range(150)}
    assert csv_path.read_text().count("run_id,config_hash") == 1  # one header


@pytest.mark.slow
def test_sigkill_mid_append_loop_leaves_a_parseable_csv(tmp_path):
    csv_path = tmp_path / "killed.csv"
    worker = _spawn_appender(csv_path, "k", 100_000)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until it is well into its loop
        if csv_path.exists() and csv_path.stat().st_size > 200_000:
            break
        time.sleep(0.05)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    assert worker.returncode == -signal.SIGKILL
    store = ResultStore(csv_path)
    with warnings.catch_warnings():
        # Linux may cut a multi-page write short on SIGKILL; the reader must skip that tail.
        warnings.simplefilter("ignore")
        frame = store.read()
    assert len(frame) > 10 and (frame["status"] == "ok").all()
    assert list(frame["run_id"]) == [f"k-{i}" for i in range(len(frame))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store.append(make_row(0))  # the lock was released by the kernel with the process
    assert store.csv_path.read_bytes().endswith(b"\n")
    assert len(store.read()) == len(frame) + 1


def test_a_torn_header_alone_is_rewritten(tmp_path):
    store = ResultStore(tmp_path / "runs.csv")
    store.csv_path.write_text("run_id,config_ha")  # killed while writing the header
    with pytest.warns(UserWarning, match="torn"):
        assert store.read().empty
    with pytest.warns(UserWarning, match="torn"):
        store.append(make_row(0))
    assert list(store.read()["run_id"]) == ["run-0"]


def test_git_dirty_means_code_not_the_committed_results(tmp_path, monkeypatch):
    """A sweep appending to its tracked results CSV leaves the checkout clean; a code edit not."""
    import subprocess

    from cactus_bench.store import metadata

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "demo.csv").write_text("a\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    monkeypatch.setattr(metadata, "_REPO_ROOT", tmp_path)
    monkeypatch.delenv(metadata.GIT_SHA_ENV, raising=False)
    assert metadata.git_state()[1] is False
    (tmp_path / "results" / "demo.csv").write_text("a\nb\n")
    assert metadata.git_state()[1] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert metadata.git_state()[1] is True
