"""Checks before any model loads: task data, hub checkpoints, Slurm settings; one line each."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cactus_bench.run import ConfigError, orchestrate, preflight, register_configs, run
from cactus_bench.tasks.data import TaskDataError

REPO = Path(__file__).resolve().parents[1]
register_configs()


def conf_for(*overrides: str):
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))


@pytest.fixture
def no_model_loads(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the data check")

    monkeypatch.setattr(orchestrate, "measure", refuse)


def test_missing_task_files_fail_before_models_load(tmp_path, no_model_loads):
    conf = conf_for(
        "model=tiny_random",
        "task=gsm8k",
        f"data_dir={tmp_path}",
        f"results_dir={tmp_path}/results",
        "device=cpu",
    )
    with pytest.raises(TaskDataError) as error:
        run(conf)
    line = str(error.value)
    assert "\n" not in line and "gsm8k/train.jsonl, gsm8k/test.jsonl missing" in line
    assert "data_dir" in line  # names the fix


def test_unreachable_hub_without_cached_dataset_fails_in_one_line(
    tmp_path, monkeypatch, no_model_loads
):
    monkeypatch.delenv("CACTUS_BENCH_DATA", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # the online path: unreachable, not off
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setattr("cactus_bench.models.hub.hub_reachable", lambda *a, **k: False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    conf = conf_for(
        "model=tiny_random",
        "task=ifeval",
        "data_dir=null",
        f"results_dir={tmp_path}/results",
        "device=cpu",
    )
    with pytest.raises(TaskDataError, match="the hub cannot be reached and google/IFEval is not"):
        run(conf)
    (tmp_path / "hub" / "datasets--google--IFEval").mkdir(parents=True)
    preflight.check_task_data(conf)  # cached: passes


def test_hub_dataset_follows_includes():
    from cactus_bench.tasks.data import task_yaml_path
    from cactus_bench.tasks.specs import get_spec

    names = {
        t: preflight.hub_dataset(task_yaml_path(get_spec(t), None))
        for t in ("gsm8k", "ifeval", "gpqa")
    }
    assert names == {"gsm8k": "openai/gsm8k", "ifeval": "google/IFEval", "gpqa": "Idavidrein/gpqa"}


def test_a_cuda_job_without_a_gpu_request_is_one_line():
    with pytest.raises(ConfigError, match="request no GPU .*gpus_per_node=1"):
        preflight.check_slurm(None, None, 0, ["cpu", "cuda"])
    with pytest.raises(ConfigError, match="request no GPU"):
        preflight.check_slurm(None, None, None, ["auto"])


@pytest.mark.skipif(shutil.which("sinfo") is not None, reason="Slurm is installed here")
def test_slurm_launcher_without_slurm_says_so():
    with pytest.raises(ConfigError, match="needs Slurm's commands"):
        preflight.check_slurm("gpu", None, 1, ["cuda"])


def test_cuda_asked_for_on_a_machine_without_it_is_one_line(tmp_path, no_model_loads):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    conf = conf_for("model=tiny_random", "task=demo", f"results_dir={tmp_path}", "device=cuda")
    with pytest.raises(ConfigError, match="device=cuda but this machine has 0 visible CUDA"):
        run(conf)
