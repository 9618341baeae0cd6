"""`python run.py` end to end on the tiny pair, as a user runs it (subprocesses; slow).

A single run prints its table; a sweep through the submitit local launcher writes one row per job
with the commit pinned by the launching process; a sweep killed with SIGKILL leaves a parseable
CSV and, rerun, skips what finished; a failing job in a sweep gives one line and exit status 1
while the other jobs still run.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cactus_bench.store import ResultStore

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DATA_DIR = str(SHARED_DATA) if SHARED_DATA.is_dir() else "null"  # the demo task needs only punkt


def tiny_args(tmp_path: Path, *extra: str) -> list[str]:
    flags = [a for a in extra if a.startswith("-")]  # Hydra wants -m before the overrides
    extra = tuple(a for a in extra if not a.startswith("-"))
    return [
        sys.executable,
        str(REPO / "run.py"),
        *flags,
        "model=tiny_random",
        "task=demo",
        "limit=2",
        "max_new_tokens=8",
        "m=3",
        "device=cpu",
        f"results_dir={tmp_path / 'results'}",
        f"data_dir={DATA_DIR}",
        f"hydra.run.dir={tmp_path / 'out'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        *extra,
    ]


def clean_env(**extra: str) -> dict[str, str]:
    drop = {
        "HYDRA_FULL_ERROR",
        "WANDB_API_KEY",
        "CACTUS_BENCH_GIT_SHA",
        "CACTUS_BENCH_GIT_DIRTY",
        "CACTUS_BENCH_LAUNCH_DIR",
        "CACTUS_BENCH_LAUNCH_PID",
    }
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def run_cli(args: list[str], cwd: Path, timeout: int = 600, **env: str):
    return subprocess.run(
        args, cwd=cwd, env=clean_env(**env), capture_output=True, text=True, timeout=timeout
    )


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_single_run_prints_table_and_csv_path(tmp_path):
    done = run_cli(tiny_args(tmp_path, "sampler=cactus", "delta=0.75"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    csv_path = tmp_path / "results" / "runs.csv"
    for label in ("score (", "AL (", "acceptance rate", "tokens/s", "speedup", str(csv_path)):
        assert label in done.stdout, done.stdout
    (row,) = csv_rows(csv_path)
    assert (row["status"], row["sampler"], row["delta"]) == ("ok", "cactus", "0.75")


def test_submitit_local_launcher_two_jobs_two_rows(tmp_path):
    # The launching process pins the commit; jobs must record it rather than look it up later.
    pinned = "feedfacefeedfacefeedfacefeedfacefeedface"
    done = run_cli(
        tiny_args(tmp_path, "-m", "hydra/launcher=local", "sampler=sps,cactus"),
        cwd=tmp_path,
        CACTUS_BENCH_GIT_SHA=pinned,
        CACTUS_BENCH_GIT_DIRTY="false",
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    rows = csv_rows(tmp_path / "results" / "runs.csv")
    assert sorted(r["sampler"] for r in rows) == ["cactus", "sps"]
    assert all(r["status"] == "ok" and r["git_sha"] == pinned for r in rows)
    assert all(r["git_dirty"] == "false" for r in rows)
    assert len({r["run_id"] for r in rows}) == 2
    assert list((tmp_path / "sweep" / ".submitit").iterdir())  # it really went through submitit


def test_kill_9_mid_sweep_leaves_parseable_csv_and_resume_completes(tmp_path):
    seeds = "1,2,3,4"
    args = tiny_args(tmp_path, "-m", "sampler=sps", f"seed={seeds}")
    csv_path = tmp_path / "results" / "runs.csv"
    process = subprocess.Popen(
        args,
        cwd=tmp_path,
        env=clean_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and process.poll() is None:
            if csv_path.exists() and len(csv_path.read_bytes().splitlines()) >= 2:
                break  # header + at least one finished row
            time.sleep(0.1)
        assert process.poll() is None, "the sweep ended before it could be killed"
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)

    rows = csv_rows(csv_path)  # parses: header intact, no torn row
    assert 1 <= len(rows) < 4
    assert all(r["status"] == "ok" for r in rows)
    frame = ResultStore(csv_path).read()
    assert len(frame) == len(rows) and frame["config_hash"].is_unique

    # Rerun the same sweep: finished jobs are skipped, the rest run; no duplicate rows.
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("skip:") == len(rows)
    final = csv_rows(csv_path)
    assert sorted(int(r["seed"]) for r in final) == [1, 2, 3, 4]
    assert len({r["config_hash"] for r in final}) == 4


def test_failing_job_prints_one_line_and_sweep_goes_on(tmp_path):
    missing = tmp_path / "no-such-data"
    args = [a for a in tiny_args(tmp_path, "-m", "sampler=tas") if not a.startswith("data_dir=")]
    done = run_cli([*args, f"data_dir={missing},{DATA_DIR}"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(missing) in errors[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Error executing job" not in done.stderr
    rows = csv_rows(tmp_path / "results" / "runs.csv")
    # The missing folder failed its job before any model loaded (preflight: no row); the
    # second job still ran.
    assert [r["status"] for r in rows] == ["ok"]
