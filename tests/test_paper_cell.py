"""A paper pair named without a task runs the paper's cell; the demo's small settings stay with
the demo task. Every paper setting is checked against the one source, cactus_bench/paper.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.runs import compose_cfg, compose_run_conf

from cactus_bench.paper import PAPER
from cactus_bench.run import rule_params_of

REPO = Path(__file__).resolve().parents[1]
DOCUMENTED = ["model=qwen3_8b", "sampler=cactus", "delta=0.75"]  # the README's paper cell
PAPER_PAIRS = sorted(
    p.stem.removesuffix("_default") for p in (REPO / "configs/cell").glob("*_default.yaml")
)


def assert_paper_cell(conf, sweep: dict) -> None:
    assert sweep == {"task.name": ",".join(PAPER.tasks)}  # one job, one row per paper task
    assert conf.task.name == PAPER.tasks[0]
    assert conf.limit is None and conf.repeats == 1  # every test question, once
    assert conf.m == PAPER.m
    assert conf.max_new_tokens == PAPER.max_new_tokens
    assert (conf.temperature, conf.top_p, conf.top_k) == (
        PAPER.temperature,
        PAPER.top_p,
        PAPER.top_k,
    )
    assert conf.seed == PAPER.seed
    assert conf.device == "cuda" and conf.threads is None  # a GPU node, torch's own threads
    assert conf.baseline == "cached"  # one verifier-only decode per (pair, task) across the sweep


def test_the_documented_command_composes_the_paper_cell():
    cfg = compose_cfg(DOCUMENTED, hydra_node=True)
    conf = compose_run_conf(DOCUMENTED)
    assert_paper_cell(conf, dict(cfg.hydra.sweeper.params))
    assert cfg.hydra.mode.name == "MULTIRUN"
    assert (conf.model.drafter, conf.model.verifier) == ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")
    assert conf.model.dtype == "bfloat16"
    assert conf.model.chat_template_kwargs == {"enable_thinking": True}  # Qwen3 thinking on
    rule_params = rule_params_of(conf)
    assert (rule_params.rule, rule_params.values()) == ("cactus", {"delta": 0.75})


@pytest.mark.parametrize(
    "pair", [p for p in PAPER_PAIRS if p not in ("smollm2_135m", "tiny_random")]
)
def test_every_hub_pair_has_the_paper_cell(pair):
    cfg = compose_cfg([f"model={pair}"], hydra_node=True)
    assert_paper_cell(compose_run_conf([f"model={pair}"]), dict(cfg.hydra.sweeper.params))


def test_cfg_job_prints_the_paper_cell_and_names_every_job():
    """`python run.py model=qwen3_8b sampler=cactus delta=0.75 --cfg job`, as a user types it."""
    shown = subprocess.run(
        [sys.executable, "run.py", *DOCUMENTED, "--cfg", "job"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    printed = yaml.safe_load(shown)  # the note under the config is a YAML comment
    for key, value in {
        "m": PAPER.m,
        "limit": None,
        "max_new_tokens": PAPER.max_new_tokens,
        "temperature": PAPER.temperature,
        "top_p": PAPER.top_p,
        "top_k": PAPER.top_k,
        "seed": PAPER.seed,
        "device": "cuda",
        "threads": None,
        "baseline": "cached",
        "delta": 0.75,
    }.items():
        assert printed[key] == value, key
    assert printed["task"] == {"name": "gsm8k"} and printed["model"]["dtype"] == "bfloat16"
    assert f"# multirun, 3 jobs (one row each): task.name={','.join(PAPER.tasks)}" in shown


def test_a_command_line_value_replaces_the_experiments_list_in_the_job_count():
    """As Hydra's basic sweeper runs it: sampler=sps batch=2 leave only m's three values."""
    shown = subprocess.run(
        [
            sys.executable,
            "run.py",
            "experiment=batch_sweep",
            "sampler=sps",
            "batch=2",
            "--cfg",
            "job",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "# multirun, 3 jobs (one row each): " in shown
    assert "sampler=sps batch=2 m=1,2,3" in shown


def test_demo_settings_stay_with_the_demo_task():
    small = {"limit": 5, "max_new_tokens": 96, "m": 2, "threads": 1}
    for overrides in ([], ["model=tiny_random"], ["model=qwen3_8b", "task=demo"]):
        conf = compose_run_conf(overrides)
        assert conf.task.name == "demo"
        assert {key: getattr(conf, key) for key in small} == small, overrides
    for overrides in (
        ["task=gsm8k"],
        ["model=qwen3_8b", "task=gsm8k"],
        ["model=qwen3_14b", "task=ifeval"],
    ):
        cfg = compose_cfg(overrides, hydra_node=True)
        conf = compose_run_conf(overrides)
        assert (conf.limit, conf.max_new_tokens, conf.m, conf.threads) == (
            None,
            PAPER.max_new_tokens,
            PAPER.m,
            None,
        ), overrides
        assert not cfg.hydra.sweeper.params  # a named task is one run, not the paper's three


def test_command_line_values_win_over_the_cell():
    conf = compose_run_conf([*DOCUMENTED, "m=20", "limit=50", "device=cuda:1"])
    assert (conf.m, conf.limit, conf.device) == (20, 50, "cuda:1")
