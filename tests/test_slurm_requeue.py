"""No work lost on a real Slurm: a job that hits its time limit mid-cell is requeued by submitit
and resumes from its journal, landing the row an uninterrupted run lands, no request decoded
twice. And a bad partition fails in one line before anything is submitted.

The time limit: Slurm's limits are whole minutes and its warning signal (submitit's USR2,
`signal_delay_s` before the limit) comes up to ~30 s early, so a fixed limit falls mid-cell only on
a machine of a known speed. The test therefore submits with a long limit and, once the running job
has journaled a request, lowers its limit to one minute (`scontrol update`): with the warning 58 s
before the limit, Slurm sends it at its next time-limit check (10-30 s here), in the middle of the
cell: the cell must outlast that check by a margin, so it decodes every demo prompt six times
(repeats=6) with up to 2,048 tokens each (twice was enough on the 2-core AMD EPYC; on a 2-core Intel
Xeon the whole cell then ended in 15 s, before the check). The tiny pair stops at its end-of-text
token, so the token cap alone does not lengthen the cell: one pass of 2,048 took 75 s alone but 39 s
inside the full suite, where it ended before the check came (as 512 and 1,024 tokens did, in 29 s
and 33 s).
After the requeue the test restores the 10 minutes. (submitit calls any warning signal of a job
asking <= 10 minutes a time-out, as it is here.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers.runs import COUNTED, array_id, queue

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
LIMIT = 20  # every demo prompt
REPEATS = 6  # each decoded six times, with its own seeds: the cell outlasts Slurm's limit check
pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def cell(results: Path) -> list[str]:
    data_dir = str(SHARED_DATA) if SHARED_DATA.is_dir() else "null"
    return [
        "model=tiny_random",
        "task=demo",
        f"limit={LIMIT}",
        "max_new_tokens=2048",
        f"repeats={REPEATS}",
        "m=3",
        "threads=1",
        "device=cpu",
        "baseline=none",
        "sampler=cactus",
        f"data_dir={data_dir}",
        f"results_dir={results}",
        "experiment_name=requeue",
    ]


def slurm_command(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "run.py",
        "-m",
        "hydra/launcher=slurm",
        *cell(tmp_path / "slurm"),
        f"hydra.sweep.dir={tmp_path}/sweep",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.timeout_min=10",
        "hydra.launcher.signal_delay_s=58",
        "hydra.launcher.max_num_timeout=2",
        *extra,
    ]


def journal(results: Path) -> list[dict]:
    files = list((results / "requeue.journal").glob("*.jsonl"))
    text = "".join(f.read_text() for f in files)
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def scontrol(env, job: str, limit: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"JobId={job}", f"TimeLimit={limit}"], env=env, check=True
    )


def test_a_timed_out_job_is_requeued_and_lands_the_uninterrupted_row(slurm_env, tmp_path):
    reference = subprocess.Popen(  # the uninterrupted cell, here, while Slurm runs its twin
        [sys.executable, "run.py", *cell(tmp_path / "local"), f"hydra.run.dir={tmp_path}/run"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    launcher = subprocess.Popen(
        slurm_command(tmp_path),
        cwd=REPO,
        env=slurm_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline, job, shortened, restored = time.monotonic() + 900, None, False, False
    while launcher.poll() is None and time.monotonic() < deadline:
        array = array_id(tmp_path)  # a one-job sweep is a plain job (12), not an array (12_0)
        jobs = {k: v for k, v in queue(slurm_env).items() if k.split("_")[0] == array}
        job, state = next(iter(jobs.items()), (None, None))
        if not shortened and state == "RUNNING" and journal(tmp_path / "slurm"):
            scontrol(slurm_env, job, "1")  # the limit now falls inside the cell
            shortened = True
        elif shortened and not restored and state == "PENDING":  # requeued: time for the rest
            scontrol(slurm_env, job, "10")
            restored = True
        time.sleep(0.5)
    output, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 0, output[-3000:]
    assert reference.wait(timeout=900) == 0

    logs = "".join(p.read_text() for p in (tmp_path / "sweep" / ".submitit").glob("*/*_log.out"))
    assert "this job is timed-out" in logs and "Requeued job" in logs  # the time limit hit
    assert "requests replayed from the journal" in logs  # and the next attempt resumed
    lines = journal(tmp_path / "slurm")
    requests = LIMIT * REPEATS  # each request decoded once, across both attempts
    assert len(lines) == requests and len({line["seed"] for line in lines}) == requests
    rows = {}
    for name in ("slurm", "local"):
        frame = pd.read_csv(tmp_path / name / "requeue.csv", dtype=str, keep_default_na=False)
        ok = frame[frame["status"] == "ok"]
        assert len(ok) == 1, frame[["status", "error"]]
        rows[name] = ok.iloc[0]
    assert rows["slurm"][COUNTED].to_dict() == rows["local"][COUNTED].to_dict()


def test_a_bad_partition_fails_in_one_line_before_submitting(slurm_env, tmp_path):
    done = subprocess.run(
        slurm_command(tmp_path, "hydra.launcher.partition=no-such-partition"),
        cwd=REPO,
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [text for text in done.stderr.splitlines() if text.startswith("error:")]
    assert "partition 'no-such-partition' does not exist here (sinfo lists debug)" in line
    assert not (tmp_path / "sweep" / ".submitit").exists()  # nothing was submitted
