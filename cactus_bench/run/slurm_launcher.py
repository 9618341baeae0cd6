"""hydra/launcher=slurm checks every job of a sweep before it submits any.

The launcher itself is hydra-submitit-launcher's SlurmLauncher, subclassed in
`hydra_plugins/cactus_bench_slurm` (Hydra finds launchers only in that namespace) to call
`check_sweep` first: every job is composed and validated as run.py would, its task data is
checked (`preflight.check_task_data`, once per distinct task and folder), and the launcher's
settings are checked against the cluster (`preflight.check_slurm`: partition, account, a GPU for
jobs that decode on CUDA). A bad value costs one line at submission instead of one failed job
per array task after its models loaded.

Requeue: the parent launcher is checkpointable (submitit resubmits the same job after a time
limit or a preemption, `max_num_timeout` times at most); a requeued job runs the same config,
and the run resumes from its journal (`run/resume.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import OmegaConf, open_dict

from cactus_bench.run.checks import ConfigError, validate
from cactus_bench.run.conf import RunConf
from cactus_bench.run.errors import one_line_error
from cactus_bench.run.preflight import check_slurm, check_task_data


def check_sweep(config_loader, config, params: dict[str, Any], job_overrides: Sequence) -> int:
    """Raise one line for the first bad job or setting; returns the number of jobs checked."""
    confs = [job_conf(config_loader, config, list(overrides)) for overrides in job_overrides]
    checked = set()
    for conf in confs:
        if (conf.task.name, conf.data_dir) not in checked:
            check_task_data(conf)
            checked.add((conf.task.name, conf.data_dir))
    check_slurm(
        params.get("partition"),
        params.get("account"),
        requested_gpus(params),
        [conf.device for conf in confs],
    )
    return len(confs)


def requested_gpus(params: dict[str, Any]) -> int:
    """GPUs a job asks for, however the settings say it (0 when none of them does)."""
    extra = params.get("additional_parameters") or {}
    for value in (params.get("gpus_per_node"), params.get("gpus_per_task"), extra.get("gpus")):
        if value:
            return int(str(value).split(":")[-1])
    gres = str(params.get("gres") or extra.get("gres") or "")
    return 1 if "gpu" in gres else 0


def job_conf(config_loader, config, overrides: list[str]) -> RunConf:
    """A job's config as run.py's to_run_conf makes it (hydra node dropped), validated."""
    cfg = config_loader.load_sweep_config(config, overrides)
    with open_dict(cfg):
        del cfg["hydra"]
    try:
        conf = OmegaConf.to_object(cfg)
    except Exception as error:
        raise ConfigError(one_line_error(error)) from error
    validate(conf)
    return conf
