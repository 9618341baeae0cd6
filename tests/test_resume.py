"""No work lost: a run killed with SIGKILL at a random request resumes from its journal and
lands the row an uninterrupted run lands (tiny in-memory pair, real run.py processes)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers.runs import COUNTED

from cactus_bench.store.schema import COLUMNS

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
LIMIT = 6  # demo prompts; each decoded by both arms (baseline=interleave)
pytestmark = pytest.mark.slow


def command(results: Path) -> list[str]:
    data_dir = str(SHARED_DATA) if SHARED_DATA.is_dir() else "null"  # the demo needs only punkt
    return [
        sys.executable,
        "run.py",
        "model=tiny_random",
        "task=demo",
        f"limit={LIMIT}",
        "max_new_tokens=24",
        "m=3",
        "device=cpu",
        "threads=1",
        "sampler=cactus",
        "baseline=interleave",
        f"results_dir={results}",
        f"data_dir={data_dir}",
        f"hydra.run.dir={results}/hydra",
    ]


def journal_lines(results: Path) -> list[dict]:
    text = "".join(p.read_text() for p in (results / "runs.journal").glob("*.jsonl"))
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def finished_row(results: Path) -> pd.Series:
    frame = pd.read_csv(results / "runs.csv", dtype=str, keep_default_na=False)
    assert list(frame["status"]) == ["ok"], frame[["status", "error"]]
    return frame.iloc[0]


def test_kill_9_at_a_random_request_then_rerun_lands_the_uninterrupted_row(tmp_path):
    assert set(COUNTED) <= set(COLUMNS)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(command(whole), cwd=REPO, check=True, capture_output=True, timeout=600)

    kill_at = random.Random(25).randint(1, 2 * LIMIT - 2)  # journal lines (requests) finished
    job = subprocess.Popen(
        command(killed), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 300
    while job.poll() is None and time.monotonic() < deadline:
        if (killed / "runs.journal").is_dir() and len(journal_lines(killed)) >= kill_at:
            os.kill(job.pid, signal.SIGKILL)
            break
        time.sleep(0.005)
    assert job.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    survived = len(journal_lines(killed))
    assert kill_at <= survived < 2 * LIMIT  # killed mid-run: some requests done, some not
    assert not (killed / "runs.csv").exists()  # no row: the run never finished

    rerun = subprocess.run(command(killed), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-2000:] + rerun.stderr[-2000:]
    assert f"resume: {survived} requests replayed from the journal" in rerun.stdout
    lines = journal_lines(killed)
    assert len(lines) == 2 * LIMIT  # every request decoded exactly once over both attempts
    assert len({(line["arm"], line["seed"]) for line in lines}) == 2 * LIMIT

    expected, resumed = finished_row(whole), finished_row(killed)
    assert resumed[COUNTED].to_dict() == expected[COUNTED].to_dict()
    assert float(resumed["wall_time_spec_s"]) > 0  # timings: each request as first measured
