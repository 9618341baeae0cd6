"""`make tables plots`, `make frontier-figures` and `make rules-report` rebuild the committed
outputs byte for byte from the committed CSVs, so a fresh clone can check (and a reviewer can
trust) every table and figure under results/demo, results/paper_claims, results/frontier and
results/rules."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _make(*args: str) -> None:
    subprocess.run(
        ["make", "--no-print-directory", f"PYTHON={sys.executable}", *args],
        cwd=REPO,
        check=True,
        capture_output=True,
    )


def _same_files(built: Path, committed: Path) -> None:
    names = sorted(p.name for p in built.iterdir())
    assert names == sorted(p.name for p in committed.iterdir()), "other files than committed"
    _, mismatch, errors = filecmp.cmpfiles(built, committed, names, shallow=False)
    assert not mismatch and not errors, (
        f"{mismatch + errors} differ from the committed files: regenerate them "
        "(make tables plots frontier-figures) and commit"
    )


@pytest.mark.slow
def test_make_tables_plots_rebuild_the_committed_demo_outputs(tmp_path):
    _make("tables", "plots", f"OUT={tmp_path}")
    for part in ("tables", "figures"):
        _same_files(tmp_path / part, REPO / "results" / "demo" / part)


@pytest.mark.slow
def test_make_tables_plots_rebuild_the_committed_paper_claims(tmp_path):
    """The claims' table, verdicts and figure from the 8 rows and the per-prompt table beside
    them (results/paper_claims/paper_claims.requests.csv)."""
    _make("tables", "plots", "CSV=results/paper_claims/paper_claims.csv", f"OUT={tmp_path}")
    for part in ("tables", "figures"):
        _same_files(tmp_path / part, REPO / "results" / "paper_claims" / part)


@pytest.mark.slow
def test_make_frontier_figures_rebuilds_the_committed_figures(tmp_path):
    _make("frontier-figures", f"FRONTIER_OUT={tmp_path}")
    _same_files(tmp_path, REPO / "results" / "frontier" / "figures")


def test_the_frontier_target_only_replots():
    dry = subprocess.run(
        ["make", "-n", "frontier-figures", "PYTHON=python"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "cactus_bench.frontier plots --csv results/frontier/" in dry
    assert "run.py" not in dry


def test_make_rules_report_rebuilds_the_committed_leaderboard(tmp_path):
    _make("rules-report", f"RULES_OUT={tmp_path}")
    committed = REPO / "results" / "rules"
    names = ["leaderboard.csv", "leaderboard.md", "leaderboard.definitions.md"]
    _, mismatch, errors = filecmp.cmpfiles(tmp_path, committed, names, shallow=False)
    assert not mismatch and not errors, f"{mismatch + errors}: run make rules-report and commit"
    _same_files(tmp_path / "figures", committed / "figures")
