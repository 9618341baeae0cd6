"""Checks that look at the file system, the network or the cluster, before any model loads.

`checks.validate` needs only the configuration (milliseconds, no I/O). These need the machine,
and each still fails in ONE line naming the fix, so that a run without its data, or a Slurm
array with a bad partition, fails in seconds instead of after a 32B checkpoint has loaded (in
every job of the array):

- `check_device`: a CUDA device asked for is visible;
- `check_task_data`: the data folder holds the task's files; without a folder, the hub can be
  reached or the dataset is in the local datasets cache;
- `check_hub_models`: each hub checkpoint is reachable or cached (offline mode is switched on
  when the hub cannot be reached and both are cached; `models.hub.go_offline_if_unreachable`);
- `check_slurm`: the partition exists, the account is one of the user's associations, and jobs
  that decode on CUDA request a GPU (run by the Slurm launcher before it submits anything).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from cactus_bench.models import hub
from cactus_bench.run.checks import ConfigError
from cactus_bench.run.conf import RunConf
from cactus_bench.tasks.specs import get_spec

SLURM_QUERY_TIMEOUT_S = 20


def preflight(conf: RunConf) -> None:
    """The device, the task data, then the checkpoints; raises one line on the first gap."""
    check_device(conf)
    check_task_data(conf)
    check_hub_models(conf)


def check_device(conf: RunConf) -> None:
    """A CUDA device asked for is visible (the paper's cell asks for device=cuda)."""
    if not conf.device.startswith("cuda"):
        return
    import torch  # lazy: keeps torch out of the checks

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = int(conf.device.split(":", 1)[1]) if ":" in conf.device else 0
    if index >= count:
        raise ConfigError(
            f"device={conf.device} but this machine has {count} visible CUDA device(s): run on a "
            "GPU node (hydra/launcher=slurm requests one) or set device=cpu"
        )


# ---- task data ------------------------------------------------------------------------------
def check_task_data(conf: RunConf) -> None:
    from cactus_bench.tasks.data import (  # lazy: keeps lm-eval out of the checks
        REQUIRED_FILES,
        TaskDataError,
        missing_data_message,
        resolve_data_dir,
        task_yaml_path,
    )

    task = conf.task.name
    folder = resolve_data_dir(conf.data_dir)  # a data_dir that does not exist fails here
    if folder is not None:
        missing = [name for name in REQUIRED_FILES[task] if not (folder / name).is_file()]
        if missing:
            detail = f"{', '.join(missing)} missing"
            raise TaskDataError(missing_data_message(task, folder, detail))
        return
    if task == "demo":  # its prompts ship in the package
        return
    if not _hub_offline() and hub.hub_reachable():
        return
    dataset = hub_dataset(task_yaml_path(get_spec(task), None))
    if dataset is None or not dataset_cached(dataset):
        state = "HF_HUB_OFFLINE=1" if _hub_offline() else "the hub cannot be reached"
        detail = f"{state} and {dataset} is not in the local datasets cache"
        raise TaskDataError(missing_data_message(task, None, detail))


def _hub_offline() -> bool:
    from huggingface_hub import constants  # lazy: keeps huggingface_hub out of the checks

    return bool(constants.is_offline_mode() or os.environ.get("HF_DATASETS_OFFLINE") == "1")


def hub_dataset(yaml_path: Path) -> str | None:
    """The `dataset_path` of an lm-eval task YAML, following its `include` (read as text: the
    YAML's !function tags import task code, which may try to download, e.g. IFEval's punkt)."""
    for _ in range(5):
        text = yaml_path.read_text(encoding="utf-8")
        found = re.search(r"^dataset_path:\s*(\S+)", text, flags=re.MULTILINE)
        if found:
            return found.group(1).strip("'\"")
        include = re.search(r"^include:\s*(\S+)", text, flags=re.MULTILINE)
        if not include:
            return None
        yaml_path = yaml_path.parent / include.group(1).strip("'\"")
    return None


def dataset_cached(dataset: str) -> bool:
    """A hub dataset in huggingface_hub's cache or in datasets' processed cache."""
    from huggingface_hub import constants  # lazy: as above

    hub_copy = Path(constants.HF_HUB_CACHE) / f"datasets--{dataset.replace('/', '--')}"
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE", home / "datasets"))
    return hub_copy.is_dir() or (datasets_cache / dataset.replace("/", "___")).is_dir()


# ---- checkpoints ----------------------------------------------------------------------------
def check_hub_models(conf: RunConf) -> None:
    model = conf.model
    wanted = [
        (role, model_id, revision)
        for role, model_id, revision in (
            ("verifier", model.verifier, model.verifier_revision),
            ("drafter", model.drafter, model.drafter_revision),
        )
        if _is_hub_id(model_id)
    ]
    if wanted:
        hub.go_offline_if_unreachable(wanted)


def _is_hub_id(model_id: str) -> bool:
    local = model_id.endswith(".gguf") or Path(model_id).expanduser().exists()
    return not (model_id.startswith("embedded:") or local) and model_id.count("/") == 1


# ---- Slurm ----------------------------------------------------------------------------------
def check_slurm(
    partition: str | None, account: str | None, gpus_per_node: int | None, devices: list[str]
) -> None:
    """The launcher's settings against the real cluster (sinfo, sacctmgr) and the jobs' devices.

    `devices`: every job's `device` setting; a job on cuda (or auto, which means cuda on a GPU
    node) needs a GPU in its request unless the settings ask for none on purpose (device=cpu).
    """
    on_gpu = [device for device in devices if device == "auto" or device.startswith("cuda")]
    if on_gpu and not gpus_per_node:
        raise ConfigError(
            f"the jobs decode on {on_gpu[0]} but request no GPU (hydra.launcher.gpus_per_node="
            f"{gpus_per_node}); set hydra.launcher.gpus_per_node=1, or device=cpu for CPU jobs"
        )
    if shutil.which("sinfo") is None:
        raise ConfigError(
            "hydra/launcher=slurm needs Slurm's commands (sinfo, sbatch) on this machine's PATH; "
            "submit from a login node, or `make slurm-up` for a local test cluster"
        )
    if partition:
        known = _slurm_lines(["sinfo", "-h", "-o", "%R"])
        if known is not None and partition not in known:
            raise ConfigError(
                f"Slurm partition {partition!r} does not exist here (sinfo lists "
                f"{', '.join(sorted(known)) or 'none'}); set hydra.launcher.partition"
            )
    if account:
        user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
        accounts = _slurm_lines(
            ["sacctmgr", "-nP", "show", "assoc", f"user={user}", "format=account"]
        )
        if accounts and account not in accounts:  # None or empty: no accounting to ask
            mine = ", ".join(sorted(accounts))
            raise ConfigError(
                f"Slurm account {account!r} is not one of {user}'s ({mine}); "
                "set hydra.launcher.account"
            )


def _slurm_lines(command: list[str]) -> set[str] | None:
    """The distinct non-empty output lines of a Slurm query; None when the query fails (no
    accounting database, for instance), so a check that cannot be made is skipped."""
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SLURM_QUERY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return {line.strip().rstrip("*") for line in done.stdout.splitlines() if line.strip()}
