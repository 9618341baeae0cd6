"""One verifier-only baseline per sweep: a Table-1-shaped sweep (pairs x tasks x m x rules, the
verifier row among them) on the tiny pair decodes each (pair, task) baseline exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
LIMIT = 2
pytestmark = pytest.mark.slow


def test_table1_shaped_sweep_decodes_each_baseline_once(tmp_path):
    tasks = "demo,gsm8k" if (SHARED_DATA / "gsm8k").is_dir() else "demo"
    data_dir = str(SHARED_DATA) if SHARED_DATA.is_dir() else "null"
    # A speculative arm comes first: it decodes the baseline; the verifier row then replays it.
    sweep = [
        sys.executable,
        "run.py",
        "-m",
        "model=tiny_random",
        f"task={tasks}",
        "m=2,3",
        "sampler=sps,verifier,cactus_0.75",
        "baseline=cached",
        f"limit={LIMIT}",
        "max_new_tokens=8",
        "device=cpu",
        "threads=1",
        "experiment_name=table1_tiny",
        f"results_dir={tmp_path}/results",
        f"data_dir={data_dir}",
        f"hydra.sweep.dir={tmp_path}/sweep",
    ]
    done = subprocess.run(sweep, cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    n_tasks = len(tasks.split(","))
    rows = pd.read_csv(tmp_path / "results" / "table1_tiny.csv")
    assert (rows["status"] == "ok").all()
    assert len(rows) == n_tasks * 5  # per task: sps and cactus at two m, one verifier row
    journals = sorted((tmp_path / "results" / "baselines").glob("*.journal.jsonl"))
    assert len(journals) == n_tasks  # one baseline per (pair, task)
    for journal in journals:
        lines = [json.loads(line) for line in journal.read_text().splitlines()]
        assert len(lines) == LIMIT  # each request decoded once across the 5 jobs of its task
        assert {line["num_draft_tokens"] for line in lines} == {0}  # the verifier alone
    assert done.stdout.count("decoding it once") == n_tasks
    assert done.stdout.count("reusing the cached verifier-only decode") == 3 * n_tasks
    assert done.stdout.count(f"resume: {LIMIT} requests replayed") == n_tasks  # the verifier row
    spec = rows[rows["sampler"] != "verifier"]
    assert (
        spec["speedup_tokens"].notna().all() and spec["wall_time_baseline_s"].nunique() == n_tasks
    )
