"""hydra/launcher=slurm: hydra-submitit-launcher's Slurm launcher, checked before it submits.

Before one job is submitted, every job of the sweep is composed and validated as run.py would,
its task data is checked (`preflight.check_task_data`, once per distinct task and folder), and
the launcher's settings are checked against the cluster (`preflight.check_slurm`: partition,
account, a GPU for jobs that decode on CUDA). A bad value costs one line at submission instead
of one failed job per array task after its models loaded.

Requeue: the parent launcher is already checkpointable (submitit resubmits the same job on a
time limit or a preemption, `max_num_timeout` times at most); a requeued job runs the same
config, and the run resumes from its journal (`run/resume.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf, open_dict

from cactus_bench.run.checks import ConfigError, validate
from cactus_bench.run.errors import one_line_error
from cactus_bench.run.preflight import check_slurm, check_task_data


class CheckedSlurmLauncher(SlurmLauncher):
    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        confs = [self._job_conf(list(overrides)) for overrides in job_overrides]
        checked = set()
        for conf in confs:
            source = (conf.task.name, conf.data_dir)
            if source not in checked:
                check_task_data(conf)
                checked.add(source)
        params = self.params
        extra = params.get("additional_parameters") or {}
        gpus = (
            params.get("gpus_per_node")
            or params.get("gpus_per_task")
            or ("gpu" in str(params.get("gres") or "") and 1)
            or extra.get("gpus")
            or ("gpu" in str(extra.get("gres") or "") and 1)
        )
        check_slurm(
            params.get("partition"),
            params.get("account"),
            gpus,
            [conf.device for conf in confs],
        )
        print(f"slurm: {len(confs)} jobs checked; submitting", flush=True)
        return super().launch(job_overrides, initial_job_idx)

    def _job_conf(self, overrides: list[str]):
        """A job's config as run.py's to_run_conf makes it (hydra node dropped), validated."""
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(cfg):
            del cfg["hydra"]
        try:
            conf = OmegaConf.to_object(cfg)
        except Exception as error:
            raise ConfigError(one_line_error(error)) from error
        validate(conf)
        return conf
