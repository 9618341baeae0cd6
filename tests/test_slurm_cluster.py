"""hydra/launcher=slurm on a real single-node Slurm (scripts/slurm/up.sh), not just rendered.

A sweep on the tiny pair is submitted as a job array that runs and lands one row per job in ONE
CSV; `scancel` of a running job leaves a sweep that the same command resumes (finished rows
skipped, the cancelled job run again). Skipped with the reason when Slurm is not installed or
the cluster cannot start (.ci/run installs and starts it); the cancel test also needs job
accounting (slurmdbd: submitit follows jobs with sacct, else a cancelled job never looks
finished).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers.runs import array_id, queue

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.slurm]  # slurm_env: tests/conftest.py


def sweep_command(tmp_path: Path, samplers: str) -> list[str]:
    """A tiny sweep (tiny in-memory pair, one demo prompt, 8 tokens) as a Slurm array that runs
    one job at a time on one CPU: the machine it shares has two cores."""
    return [
        sys.executable,
        "run.py",
        "-m",
        "hydra/launcher=slurm",
        "model=tiny_random",
        "task=demo",
        "limit=1",
        "max_new_tokens=8",
        "threads=1",
        "device=cpu",
        "baseline=none",
        f"sampler={samplers}",
        f"results_dir={tmp_path}/results",
        "experiment_name=slurm",
        f"hydra.sweep.dir={tmp_path}/sweep",
        "hydra.launcher.gpus_per_node=0",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.mem_gb=1",
        "hydra.launcher.timeout_min=10",
        "hydra.launcher.array_parallelism=1",
    ]


def rows(tmp_path: Path) -> pd.DataFrame:
    csv = tmp_path / "results" / "slurm.csv"
    return pd.read_csv(csv) if csv.exists() else pd.DataFrame(columns=["sampler", "status"])


def test_sweep_lands_one_row_per_job_in_one_csv(slurm_env, tmp_path):
    done = subprocess.run(
        sweep_command(tmp_path, "verifier,cactus"),
        cwd=REPO,
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    frame = rows(tmp_path)
    assert sorted(frame["sampler"]) == ["cactus", "verifier"]
    assert (frame["status"] == "ok").all() and frame["config_hash"].nunique() == 2
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode == 0:  # the commit pinned at submission reached the jobs
        assert set(frame["git_sha"]) == {head.stdout.strip()}
    logs = sorted((tmp_path / "sweep" / ".submitit").glob("*_*/*_log.out"))
    assert len(logs) == 2  # two array tasks really ran under Slurm


def test_scancel_of_a_running_job_leaves_a_resumable_sweep(slurm_env, tmp_path):
    accounting = subprocess.run(["sacct", "-n", "-X"], env=slurm_env, capture_output=True)
    if accounting.returncode != 0:
        pytest.skip(
            "no job accounting on the test cluster (install slurmdbd mariadb-server): "
            "submitit cannot see a cancelled job finish without sacct"
        )
    command = sweep_command(tmp_path, "verifier,sps,cactus")
    launcher = subprocess.Popen(
        command,
        cwd=REPO,
        env=slurm_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline, cancelled = time.monotonic() + 600, None
    while cancelled is None and time.monotonic() < deadline and launcher.poll() is None:
        array = array_id(tmp_path)  # this sweep's jobs only (an earlier one may still exit)
        if array and queue(slurm_env).get(f"{array}_1") == "RUNNING":  # sps, starting up
            subprocess.run(["scancel", f"{array}_1"], env=slurm_env, check=True)
            cancelled = f"{array}_1"
        time.sleep(0.5)
    output, _ = launcher.communicate(timeout=600)
    assert cancelled is not None, output[-3000:]
    assert launcher.returncode == 1, output[-3000:]  # the sweep reports the cancelled job
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and cancelled in errors[0]
    # The launcher stops at the first failed job; the array's later tasks go on in Slurm. A
    # re-run before they end would run them twice, so wait for the array to drain first.
    array, drained_by = cancelled.split("_")[0], time.monotonic() + 600
    while any(job.startswith(f"{array}_") for job in queue(slurm_env)):
        assert time.monotonic() < drained_by, "the array did not finish"
        time.sleep(1)
    first = rows(tmp_path)
    assert sorted(first["sampler"]) == ["cactus", "verifier"]  # the other jobs still finished

    again = subprocess.run(
        command, cwd=REPO, env=slurm_env, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    final = rows(tmp_path)
    assert sorted(final["sampler"]) == ["cactus", "sps", "verifier"]
    assert (final["status"] == "ok").all() and len(final) == 3  # nothing ran twice
    kept = final[final["sampler"] != "sps"]["run_id"]
    assert set(kept) == set(first["run_id"])  # finished rows were skipped, not re-run
