"""End to end on the tiny pair: run_frontier writes the long CSV and the figures, a rerun reuses
the cached contexts (no generation) and reproduces the CSV, figures redraw byte-identically, and
`python run.py experiment=frontier` runs it and rejects a bad grid in one line."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cactus_bench.frontier import FrontierConf, run_frontier
from cactus_bench.frontier.rows import COLUMNS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("single_thread")]
REPO = Path(__file__).resolve().parents[1]


def _conf(out_dir: Path, **changes) -> FrontierConf:
    settings = dict(
        pair="tiny_random",
        prompts=["demo"],
        num_demo=5,
        max_new_tokens=32,
        batch_size=4,
        deltas=[0.1, 1.0],
        tas_thresholds=[0.09, 0.3],
        topk_ks=[2, 5],
        interp_alphas=[0.5],
        lenience_ls=[0.5],
        cascade_alphas=[0.5],
        fsd_thresholds=[0.2],
        bild_taus=[2.0],
        al_max_m=4,
        bootstrap=100,
        engine_check=30,
        out_dir=str(out_dir),
        progress=False,
    )
    settings.update(changes)
    return FrontierConf(**settings)


def test_run_frontier_end_to_end(tmp_path, monkeypatch):
    outcome = run_frontier(_conf(tmp_path))
    frame = pd.read_csv(outcome.csv_path, keep_default_na=False, na_values=[""])
    assert list(frame.columns) == list(COLUMNS)
    assert set(frame.pair) == {"tiny_random"} and set(frame.prompt_set) == {"held_out:demo5"}
    assert outcome.num_positions == frame.query("statistic == 'positions'").value.iloc[0] > 50
    rules = set(frame.rule)
    assert {"sps", "cactus", "tas", "topk", "interp", "verifier", "mentored", "tokenv3"} <= rules
    assert {f"cactus_exact:{d}" for d in ("kl", "reverse_kl", "chi2", "hellinger", "tv")} <= rules
    stats = set(frame.statistic)
    for name in (
        "acceptance",
        "gain",
        "kl",
        "reverse_kl",
        "tv",
        "q_zero_share",
        "kl_q99",
        "kl_max",
        "kl_share_above_delta",
        "thm3_violation_share",
        "paired_acceptance_vs:cactus",
        "overshoot_draft_share",
        "al@m=4",
        "entropy",
        "engine_first_acceptance",
        "predicted_first_acceptance",
        "stop_mass_ratio",
        "stop_mass_ratio@stop",
        "out_of_head_per_1000",
        "emitted_entropy_vs_q",
        "stop_positions",
    ):
        assert name in stats, name
    assert any(s.startswith("gain@H=") for s in stats)
    # rule pairs at matched divergence: the exact KL rule on the Taylor rule's KL curve
    assert "matched_kl_acceptance_vs:cactus" in stats
    sps = frame[(frame.rule == "sps") & (frame.statistic == "acceptance")].iloc[0]
    assert 0 < sps.ci_low <= sps.value <= sps.ci_high < 1
    assert frame[(frame.rule == "sps") & (frame.statistic == "gain")].empty
    exact = frame[(frame.rule == "cactus_exact:kl") & (frame.statistic == "overshoot_draft_share")]
    assert (exact.value == 0).all()  # the exact rule never breaks its budget
    ratio = frame[(frame.rule == "sps") & (frame.statistic == "stop_mass_ratio")].iloc[0]
    assert ratio.value == pytest.approx(1.0, abs=1e-9)  # SpS emits q: q's own stop mass
    definitions = (tmp_path / "tiny_random.definitions.md").read_text()
    assert "thm3_violation_share" in definitions and "q_zero_share" in definitions
    meta = (tmp_path / "tiny_random.json").read_text()
    assert '"total_cpu_s"' in meta and '"positions"' in meta
    kinds = {path.name.split("_")[0] for path in outcome.figures}
    assert kinds == {"frontier", "gamma", "gain", "overshoot", "entropy", "al", "matched", "stop"}
    assert all(path.stat().st_size > 0 for path in outcome.figures)

    # A rerun reuses the cached contexts (generation would fail) and reproduces every number.
    pdf = next(p for p in outcome.figures if p.suffix == ".pdf")
    first_pdf, first_csv = pdf.read_bytes(), outcome.csv_path.read_text()

    def no_generation(*args, **kwargs):
        raise AssertionError("the cached contexts were not reused")

    monkeypatch.setattr("cactus_bench.engine.batch_generate.sample_continuations", no_generation)
    again = run_frontier(_conf(tmp_path))
    assert again.csv_path.read_text() == first_csv
    assert pdf.read_bytes() == first_pdf  # no creation date: redraws are byte-stable


def test_module_cli_and_plots_subcommand(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [
        "--pair",
        "tiny_random",
        "--prompts",
        "demo",
        "--num-demo",
        "3",
        "--max-new-tokens",
        "16",
        "--deltas",
        "1",
        "--rules",
        "cactus",
        "--bootstrap",
        "50",
        "--al-max-m",
        "2",
        "--figures",
        "false",
        "--progress",
        "false",
        "--out-dir",
        str(tmp_path),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "cactus_bench.frontier", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "positions" in done.stdout and (tmp_path / "tiny_random.csv").is_file()
    plots = subprocess.run(
        [
            sys.executable,
            "-m",
            "cactus_bench.frontier",
            "plots",
            "--csv",
            str(tmp_path / "tiny_random.csv"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plots.returncode == 0, plots.stderr[-2000:]
    assert (tmp_path / "figures" / "gain_tiny_random.png").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "cactus_bench.frontier", "--deltas", "-1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: frontier.deltas must hold values >= 0 (0 is SpS) (got -1.0)"
    ]


def test_run_py_experiment_frontier(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "CACTUS_BENCH_DATA": ""}
    common = [
        "experiment=frontier",
        "model=tiny_random",
        f"results_dir={tmp_path}",
        f"hydra.run.dir={tmp_path}/hydra",
    ]
    # No data folder: the demo prompts only; limit=2 takes two of them.
    done = subprocess.run(
        [sys.executable, "run.py", *common, "limit=2"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    frame = pd.read_csv(tmp_path / "frontier" / "tiny_random.csv")
    assert set(frame.prompt_set) == {"held_out:demo2"}
    assert {"mentored", "fsd", "bild"} <= set(frame.rule)
    bad = subprocess.run(
        [sys.executable, "run.py", *common, "frontier.rules=[medusa]"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert bad.returncode == 2
    # The frontier's settings are not the run's: its grid is the module CLI's (--rules ...).
    assert len(bad.stderr.strip().splitlines()) == 1 and "frontier" in bad.stderr
