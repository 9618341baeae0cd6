"""One run: its configuration, its checks, its identity, and its orchestration.

conf.py         the schema run.py composes into (RunConf and its parts; paper defaults)
checks.py       validate(conf) and the rule's typed parameters: one-line ConfigErrors, no torch
errors.py       one line for any Hydra / OmegaConf / run error
launch.py       git state and launch folder pinned for every job of a sweep; resolvers
identity.py     RunIdentity: config hash, CSV identity columns, description, W&B config,
                baseline-cache key, all from one place
orchestrate.py  run(conf): resume check, measure, error rows, append the row
measure.py      decode the task and its baseline with a backend's decoders, summarise
resume.py       journal every request as it ends; a rerun replays the journal, decodes the rest
baseline.py     the verifier-only baseline, decoded once per sweep (baseline=cached)
preflight.py    task data, checkpoints, Slurm settings: checked before any model loads
slurm_launcher.py  every job of a Slurm sweep checked before any is submitted
backends/       hf (this project's engine) and vllm: the decoders a run measures
wandb.py        logger=wandb's mirror;  console.py: what a finished run prints

    from cactus_bench.run import run, run_conf_from_dict, format_outcome
    print(format_outcome(run(run_conf_from_dict({...}))))

Importing this package imports neither torch nor lm-eval; `run()` does, after validation.
"""

from __future__ import annotations

from cactus_bench.run.checks import (
    ConfigError,
    ignored_settings,
    rule_params_of,
    run_conf_from_dict,
    validate,
)
from cactus_bench.run.conf import RunConf, register_configs
from cactus_bench.run.console import RunOutcome, format_outcome
from cactus_bench.run.errors import one_line_error
from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.launch import pin_launch_context
from cactus_bench.run.orchestrate import build_identity, run
from cactus_bench.samplers.params import RuleParams

__all__ = [
    "ignored_settings",
    "ConfigError",
    "RunConf",
    "RunIdentity",
    "RunOutcome",
    "RuleParams",
    "build_identity",
    "format_outcome",
    "one_line_error",
    "pin_launch_context",
    "register_configs",
    "run",
    "run_conf_from_dict",
    "rule_params_of",
    "validate",
]
