"""make test's parallel workers: every real-Slurm test lands on one worker.

They share one single-node cluster, and a session-scoped `slurm_env` on each of two workers would
start and stop it under the other's tests (seen: one worker's start stopped the cluster the other
had just started, and its sbatch found no controller). tests/conftest.py groups them with
xdist_group; this runs that hook, on two workers as `make test` does, over two marked modules."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODULE = """
import pytest

pytestmark = [pytest.mark.slurm]


def test_one():
    pass


def test_two():
    pass
"""


@pytest.mark.slow
def test_the_real_slurm_tests_share_one_worker_under_make_tests_options(tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    for name in ("test_first_cluster.py", "test_second_cluster.py"):
        (tmp_path / "tests" / name).write_text(MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slurm: real Slurm\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = re.findall(r"\[(gw\d+)\] .*PASSED (\S+)", done.stdout)
    assert len(ran) == 4, done.stdout[-2000:]
    assert all(test.endswith("@slurm") for _, test in ran), ran  # xdist saw the group
    assert len({worker for worker, _ in ran}) == 1, ran
