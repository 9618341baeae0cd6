"""cactus-bench's Slurm launcher (configs/hydra/launcher/slurm.yaml): hydra-submitit-launcher's,
checking every job of the sweep before it submits any (cactus_bench/run/slurm_launcher.py).
It lives here because Hydra finds launchers only in the `hydra_plugins` namespace."""

from __future__ import annotations

from collections.abc import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher


class CheckedSlurmLauncher(SlurmLauncher):
    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        from cactus_bench.run.slurm_launcher import check_sweep

        count = check_sweep(
            self.hydra_context.config_loader, self.config, self.params, job_overrides
        )
        print(f"slurm: {count} jobs checked; submitting", flush=True)
        return super().launch(job_overrides, initial_job_idx)
