"""Run configs as run.py composes them, and what the run tests read back.

- `compose_cfg` / `compose_run_conf` / `sweep_params`: any overrides against the real configs/
  folder (Hydra's compose API), as run.py composes, converts and validates them, and a
  composed sweep's parameters;
- `tiny_conf` / `compose_tiny`: the tiny run (model=tiny_random task=demo, 2 prompts, 8 new
  tokens, m=3), results under a test's tmp_path;
- `csv_rows`: a results CSV's rows; `COUNTED`: the columns a resumed or requeued run must land
  as an uninterrupted one does;
- `queue` / `array_id`: the test Slurm cluster's jobs, and a sweep's array id.
"""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from cactus_bench.run import ConfigError, RunConf, one_line_error, register_configs, validate

REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "configs"
SHARED_DATA = REPO.parent / "shared" / "data"

register_configs()


def compose_cfg(overrides: list[str], hydra_node: bool = False):
    """The composed config (with Hydra's own node, e.g. the sweeper's params, if hydra_node)."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=hydra_node)


def compose_run_conf(overrides: list[str]) -> RunConf:
    """What run.py does: compose, convert to plain dataclasses, validate."""
    try:
        conf = OmegaConf.to_object(compose_cfg(overrides))
    except Exception as error:
        raise ConfigError(one_line_error(error)) from error
    validate(conf)
    return conf


def sweep_params(cfg) -> dict[str, list[str]]:
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    return {key: str(value).split(",") for key, value in params.items()}


def tiny_conf(tmp_path: Path, *overrides: str) -> RunConf:
    """model=tiny_random task=demo, 2 prompts, 8 new tokens, m=3, results under tmp_path."""
    conf = compose_tiny(tmp_path, *overrides)
    validate(conf)
    return conf


def compose_tiny(tmp_path: Path, *overrides: str) -> RunConf:
    """tiny_conf's composition without validate(), for tests of validation itself."""
    data_dir = str(SHARED_DATA) if SHARED_DATA.is_dir() else "null"  # demo needs only punkt
    tiny = ["model=tiny_random", "task=demo", "limit=2", "max_new_tokens=8", "m=3", "device=cpu"]
    paths = [f"results_dir={tmp_path / 'results'}", f"data_dir={data_dir}"]
    return OmegaConf.to_object(compose_cfg([*tiny, *paths, *overrides]))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# Everything a row measures except timings (wall times, phase times, tokens/s, speedups).
COUNTED = [
    "config_hash",
    "n_prompts",
    "score",
    "score_ci_low",
    "score_ci_high",
    "metrics_json",
    "score_by_prompt",
    "prompts_hash",
    "al",
    "al_ci_low",
    "al_ci_high",
    "tokens_per_step",
    "tokens_per_step_ci_low",
    "tokens_per_step_ci_high",
    "accept_rate",
    "accept_rate_by_pos",
    "draft_tokens_drafted",
    "draft_tokens_accepted",
    "draft_tokens_rejected",
    "generated_tokens",
    "num_steps",
    "baseline_generated_tokens",
]


def queue(env) -> dict[str, str]:
    """Job id (array tasks as 12_1) -> state, from squeue."""
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env=env, capture_output=True, text=True)
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


def array_id(tmp_path: Path) -> str | None:
    """The Slurm array id of the sweep in tmp_path (submitit names a folder after it)."""
    folders = (tmp_path / "sweep" / ".submitit").glob("*")
    return next((f.name for f in folders if f.name.isdigit()), None)
