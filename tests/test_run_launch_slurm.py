"""hydra/launcher=slurm composes and renders the expected sbatch script, without submitting.

The launcher is hydra-submitit-launcher's own SlurmLauncher, fed from our composed config; only
the last step is replaced: instead of calling sbatch, the array's submission file is rendered by
submitit's SlurmExecutor (the text it would pass to sbatch) and kept for inspection.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import submitit
from hydra import compose, initialize_config_dir
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf
from submitit.slurm.slurm import SlurmExecutor

from cactus_bench.run import register_configs
from cactus_bench.store.metadata import GIT_DIRTY_ENV, GIT_SHA_ENV

REPO = Path(__file__).resolve().parents[1]

register_configs()


class _FakeJob:
    def results(self):
        done = JobReturn()
        done.status = JobStatus.COMPLETED
        done.return_value = None
        return [done]


def render_sbatch(config_dir: Path, overrides: list[str], jobs: list[list[str]], monkeypatch):
    """The sbatch script hydra/launcher=slurm would submit for `jobs` (one array)."""
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose(
            "config", overrides=["hydra/launcher=slurm", *overrides], return_hydra_config=True
        )
    params = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)  # as Hydra instantiates
    assert params.pop("_target_").endswith("SlurmLauncher")
    rendered: list[str] = []

    def map_array(self, fn, *iterables):
        count = len(list(zip(*iterables, strict=True)))
        executor = self._executor  # the SlurmExecutor the launcher configured
        array = SlurmExecutor(executor.folder, executor.max_num_timeout)
        array.update_parameters(**executor.parameters)
        array.parameters["map_count"] = count  # what submitit sets for a job array
        rendered.append(array._make_submission_file_text(array._submitit_command_str, "test"))
        return [_FakeJob() for _ in range(count)]

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: 2))  # no srun here
    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    launcher = SlurmLauncher(**params)
    launcher.setup(hydra_context=None, task_function=lambda cfg: None, config=cfg)
    launcher.launch(jobs, initial_job_idx=0)
    (script,) = rendered
    return script


def sbatch_flags(script: str) -> dict[str, str]:
    flags = {}
    for line in script.splitlines():
        if line.startswith("#SBATCH --"):
            key, _, value = line.removeprefix("#SBATCH --").partition("=")
            flags[key] = value
    return flags


def test_slurm_launcher_renders_expected_sbatch(tmp_path, monkeypatch):
    monkeypatch.setenv(GIT_SHA_ENV, "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv(GIT_DIRTY_ENV, "false")
    script = render_sbatch(
        REPO / "configs",
        [
            f"hydra.sweep.dir={tmp_path}/sweep",
            "hydra.launcher.partition=gpu-a100",
            "hydra.launcher.account=my-lab",
            "hydra.launcher.timeout_min=90",
        ],
        [["sampler=sps"], ["sampler=cactus"], ["sampler=tas"]],
        monkeypatch,
    )
    flags = sbatch_flags(script)
    assert flags["partition"] == "gpu-a100"
    assert flags["account"] == "my-lab"
    assert flags["time"] == "90"
    assert flags["gpus-per-node"] == "1"
    assert flags["cpus-per-task"] == "8"
    assert flags["mem"] == "64GB"
    assert flags["array"] == "0-2%3"  # three jobs, all allowed at once (array_parallelism 32)
    assert flags["output"].startswith(f"{tmp_path}/sweep/.submitit/")
    # The commit seen by the launching process is baked into the script: jobs record it.
    assert f"export {GIT_SHA_ENV}=0123456789abcdef0123456789abcdef01234567" in script
    assert f"export {GIT_DIRTY_ENV}=false" in script
    assert "export CACTUS_BENCH_LAUNCH_DIR=" in script
    assert "-m submitit.core._submit" in script


def test_git_sha_resolves_from_the_checkout_when_not_pinned(tmp_path, monkeypatch):
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("not a git checkout with a commit")
    sha = done.stdout.strip()
    monkeypatch.delenv(GIT_SHA_ENV, raising=False)
    script = render_sbatch(
        REPO / "configs",
        [f"hydra.sweep.dir={tmp_path}/sweep"],
        [["sampler=sps"], ["sampler=cactus"]],
        monkeypatch,
    )
    assert f"export {GIT_SHA_ENV}={sha}" in script


def test_local_override_file_sets_cluster_fields(tmp_path, monkeypatch):
    # configs/local/slurm.yaml is git-ignored; users put their partition/account there.
    config_dir = tmp_path / "configs"
    shutil.copytree(REPO / "configs", config_dir, ignore=shutil.ignore_patterns("local"))
    (config_dir / "local").mkdir()
    (config_dir / "local" / "slurm.yaml").write_text("partition: big\naccount: team\nqos: high\n")
    script = render_sbatch(
        config_dir,
        [f"hydra.sweep.dir={tmp_path}/sweep"],
        [["sampler=sps"], ["sampler=cactus"]],
        monkeypatch,
    )
    flags = sbatch_flags(script)
    assert (flags["partition"], flags["account"], flags["qos"]) == ("big", "team", "high")
    # the command line still wins over the local file
    script = render_sbatch(
        config_dir,
        [f"hydra.sweep.dir={tmp_path}/sweep2", "hydra.launcher.partition=small"],
        [["sampler=sps"], ["sampler=cactus"]],
        monkeypatch,
    )
    assert sbatch_flags(script)["partition"] == "small"
