"""cactus-bench command line: one run, a sweep, or a Slurm array, configured by Hydra.

    python run.py                                   # embedded demo: smollm2_135m, demo task, cactus
    python run.py model=qwen3_8b task=gsm8k sampler=cactus delta=0.75 m=20
    python run.py -m sampler=cactus delta=0.25,0.5,0.75,1.0 task=gsm8k,ifeval,gpqa model=qwen3_8b
    python run.py experiment=table1 hydra/launcher=slurm    # a paper preset as a Slurm array
    python run.py --cfg job                         # print the composed config (resolved)

Configs live in configs/ (schema: cactus_bench/run/conf.py). This file is the only code that sees
a Hydra DictConfig: it turns it into a plain RunConf and hands it to cactus_bench.run. Any
configuration or run error ends in ONE line on stderr and a nonzero exit status (2 for a bad
configuration, 1 for a failed run); in a sweep every failed job prints its line and the other
jobs still run. Set HYDRA_FULL_ERROR=1 for full tracebacks instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from cactus_bench.run import (
    ConfigError,
    RuleParams,
    RunConf,
    format_outcome,
    ignored_settings,
    one_line_error,
    pin_launch_context,
    register_configs,
    validate,
)

CONFIG_ERROR_EXIT = 2
RUN_ERROR_EXIT = 1
FRONTIER_EXPERIMENT = "frontier"  # experiment=frontier runs cactus_bench.frontier's program
LAUNCH_PID_ENV = "CACTUS_BENCH_LAUNCH_PID"  # the process that runs Hydra (not a submitit job)

_failures: list[BaseException] = []  # jobs of this process that failed (printed already)


def to_run_conf(cfg: DictConfig) -> tuple[RunConf, RuleParams]:
    """The composed config as plain dataclasses, validated (before anything heavy loads), and
    the rule's checked parameters that `run` takes so that it does not validate again."""
    try:
        conf = OmegaConf.to_object(cfg)
    except Exception as error:  # e.g. a missing value (???) or an interpolation to nowhere
        raise ConfigError(one_line_error(error)) from error
    return conf, validate(conf)


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        conf, rule_params = to_run_conf(cfg)
        for line in ignored_settings(conf, rule_params):
            print(line, file=sys.stderr, flush=True)
        if conf.experiment_name == FRONTIER_EXPERIMENT:  # its own program, not a task run
            from cactus_bench.frontier.__main__ import run_from_run_conf

            print(run_from_run_conf(conf), flush=True)
            return
        from cactus_bench.run import run  # after validation: a bad config never waits for torch

        outcome = run(conf, rule_params)
    except Exception as error:
        in_job_process = os.environ.get(LAUNCH_PID_ENV) != str(os.getpid())
        if in_job_process or os.environ.get("CACTUS_BENCH_TRACEBACK"):
            raise  # a submitit job: its launcher collects the error; or the user wants it all
        # Report here, one line per failed job, and let a sweep go on with its other jobs.
        print(f"error: {one_line_error(error)}", file=sys.stderr, flush=True)
        _failures.append(error)
        return
    print(format_outcome(outcome), flush=True)


def _command_line_overrides(argv: list[str]) -> list[str]:
    return [arg for arg in argv if "=" in arg and not arg.startswith("-")]


def _compose(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The config as Hydra composes it for these overrides (outside a Hydra run)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(Path(__file__).parent / "configs"), version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=with_hydra)


def _is_config_error(error: BaseException) -> bool:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(error, ConfigError | HydraException | OmegaConfBaseException)


def sweep_note(argv: list[str]) -> str | None:
    """A YAML comment under `--cfg job` naming every job when the config sweeps (a paper pair's
    cell runs one job per task; Hydra prints only the first job's config)."""
    overrides = _command_line_overrides(argv)
    given = dict(arg.split("=", 1) for arg in overrides if "=" in arg)
    swept = {key: value for key, value in given.items() if "," in value}
    try:
        plain = [arg for arg in overrides if arg.split("=", 1)[0] not in swept]
        cfg = _compose(plain, with_hydra=True)
    except Exception:  # the config itself failed: Hydra has said why already
        return None
    # as Hydra's basic sweeper: a command-line value replaces the config's list for its key
    params = {**dict(cfg.hydra.sweeper.params or {}), **swept}
    params.update({key: given[key] for key in params if key in given})
    if not params:
        return None
    jobs = 1
    for values in params.values():
        jobs *= len(str(values).split(","))
    listed = " ".join(f"{key}={value}" for key, value in params.items())
    return f"# multirun, {jobs} jobs (one row each): {listed}; the config above is the first\n"


def cli() -> None:
    register_configs()
    pin_launch_context()
    os.environ[LAUNCH_PID_ENV] = str(os.getpid())
    if os.environ.get("HYDRA_FULL_ERROR"):
        os.environ["CACTUS_BENCH_TRACEBACK"] = "1"
    # Hydra prints its own multi-line reports unless HYDRA_FULL_ERROR is set: set it so that
    # composition errors reach the handler below, which prints one line.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    printing_config = bool({"--cfg", "-c"} & set(sys.argv))
    if printing_config and "--resolve" not in sys.argv:
        # resolved, so that the sampler node shows the value the run uses (`delta=` included)
        sys.argv.append("--resolve")
    try:
        main()
        if printing_config and "hydra" not in sys.argv:
            print(sweep_note(sys.argv[1:]) or "", end="", flush=True)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as error:
        if os.environ.get("CACTUS_BENCH_TRACEBACK"):
            raise
        print(f"error: {one_line_error(error)}", file=sys.stderr, flush=True)
        _failures.append(error)
    if _failures:
        config_only = all(_is_config_error(error) for error in _failures)
        sys.exit(CONFIG_ERROR_EXIT if config_only else RUN_ERROR_EXIT)


if __name__ == "__main__":
    cli()
