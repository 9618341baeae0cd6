"""Renamed columns (schema.RENAMED_COLUMNS): CSVs written under the old names still resume,
upgrade and report, and their values land in the renamed columns."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pandas as pd
import pytest

from cactus_bench.report.load import aggregate, load_results
from cactus_bench.store import COLUMNS, ResultStore, config_hash
from cactus_bench.store.schema import RENAMED_COLUMNS

REPO = Path(__file__).resolve().parents[1]
OLD_CSVS = [
    REPO / "tests" / "fixtures" / "results_small.csv",
    # a real sweep's CSV as the store wrote it before the renames (the Intel Xeon demo rows)
    REPO / "tests" / "fixtures" / "demo_old_names.csv",
]


def _header(path: Path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return next(csv.reader(handle))


def _column(path: Path, name: str) -> list[str]:
    with open(path, newline="", encoding="utf-8") as handle:
        return [row[name] for row in csv.DictReader(handle)]


@pytest.mark.parametrize("path", OLD_CSVS, ids=lambda p: p.name)
def test_the_report_reads_csvs_written_under_the_old_names(path):
    header = _header(path)
    assert "speedup" in header and "speedup_tokens" not in header  # really an old file
    frame = load_results([path])
    assert "speedup" not in frame.columns and "n_samples" not in frame.columns
    ok = [row for row in csv.DictReader(open(path, encoding="utf-8")) if row["status"] == "ok"]
    old = pd.to_numeric(pd.Series([row["speedup"] for row in ok]).replace("", None))
    assert list(frame["speedup_tokens"].astype(float).fillna(-1)) == list(old.fillna(-1))
    assert frame["speedup_tokens"].notna().any()
    if "n_samples" in header:
        assert list(frame["n_prompts"].astype(int)) == [int(row["n_samples"]) for row in ok]
    assert aggregate(frame)["speedup_tokens"].notna().any()


def test_the_store_renames_an_old_header_once_and_keeps_its_values(tmp_path):
    path = tmp_path / "demo.csv"
    shutil.copy(OLD_CSVS[1], path)
    old_speedups = _column(path, "speedup")
    old_prompts = _column(path, "n_samples")
    store = ResultStore(path)
    read = [None if pd.isna(v) else float(v) for v in store.read()["speedup_tokens"]]
    assert read == [float(v) if v else None for v in old_speedups]
    assert store.has_finished(_column(path, "config_hash")[0])  # resume sees the old rows
    new = {
        "run_id": "new",
        "config_hash": config_hash({"new": 1}),
        "task": "demo",
        "sampler": "sps",
        "n_prompts": 3,
        "speedup_tokens": 1.25,
        "status": "ok",
    }
    store.append(new)
    header = _header(path)
    assert not set(RENAMED_COLUMNS) & set(header)
    assert set(COLUMNS) <= set(header) and len(header) == len(set(header))
    assert _column(path, "speedup_tokens") == [*old_speedups, "1.25"]
    assert _column(path, "n_prompts") == [*old_prompts, "3"]
    store.append({**new, "run_id": "again", "config_hash": config_hash({"new": 2})})
    assert _header(path) == header  # upgraded once
