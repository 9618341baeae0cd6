"""The length study's arms through `python run.py experiment=paper_claims` (subprocesses; slow):
the tiny random pair on 2 demo prompts at 8 new tokens, so nothing here measures a rule.

SpS and Cactus (δ = 1) with stop=exact as sweep entries, then SpS at m = 1 as the Makefile's
second command: each row carries its guards and m, the length and diagnostic columns are filled,
and the claims report tells the three arms apart and writes the length section.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cactus_bench.report.claims import arm_rows
from cactus_bench.report.claims_length import HEADING
from cactus_bench.report.claims_page import claims_rows, write_claims_tables
from cactus_bench.report.claims_settings import ClaimSettings

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
DATA_DIR = str(SHARED_DATA) if SHARED_DATA.is_dir() else "null"  # the demo task needs only punkt
QUICK = ClaimSettings({"prompt": 0.02, "inst": 0.02}, 200, 2, 0.95)
# the columns every speculative row of the length study must fill (store/columns.py)
FILLED = (
    "out_of_head_c",
    "mean_answer_tokens",
    "length_ratio",
    "cap_out_share",
    "cap_out_diff",
    "out_of_head_per_1k",
    "repeat_share",
    "loop_share",
)


def run(tmp_path: Path, name: str, *overrides: str) -> None:
    args = [
        sys.executable,
        str(REPO / "run.py"),
        "experiment=paper_claims",
        "model=tiny_random",
        "task=demo",
        "limit=2",
        "max_new_tokens=8",
        f"data_dir={DATA_DIR}",
        f"results_dir={tmp_path / 'results'}",
        f"hydra.sweep.dir={tmp_path / name}",
        *overrides,
    ]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


def test_two_length_arms_run_as_the_experiment_and_the_report_tells_them_apart(tmp_path):
    run(tmp_path, "sweep", "sampler=sps,cactus_1.0_stop_exact")
    run(tmp_path, "second", "sampler=sps", "m=1")  # the Makefile's second command
    csv = tmp_path / "results" / "paper_claims.csv"
    rows = claims_rows(csv)
    assert len(rows) == 3
    keyed = {(r.sampler, int(r.m), r.stop, float(r.near_top)): r for r in rows.itertuples()}
    assert set(keyed) == {
        ("sps", 2, "off", 0.0),
        ("cactus", 2, "exact", 0.0),
        ("sps", 1, "off", 0.0),
    }
    for row in rows.itertuples():
        empty = [name for name in FILLED if pd.isna(getattr(row, name))]
        assert not empty, f"{row.sampler} m={row.m}: empty {empty}"
        assert row.relax_in == "all" and int(row.strict_first) == 0
    labels = [label for label, _ in arm_rows(rows)]
    assert labels == ["SpS", "Cactus (δ = 1) stop=exact", "SpS (m = 1)"]
    table, page = write_claims_tables(csv, tmp_path / "report", None, QUICK)
    assert pd.read_csv(table).arm.tolist() == labels
    text = page.read_text()
    section = text[text.index(HEADING) : text.index("## Verdicts")]
    assert [line.split(" | ")[0] for line in section.splitlines() if line.startswith("| ")][1:] == [
        f"| {label}" for label in labels
    ]
