"""A CPU's device name says "1 torch thread", and rows written before it said "1 torch threads"
read as today's wherever a table or figure names the machine."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from cactus_bench.report.load import normalise_device_name, read_results_csv
from cactus_bench.store import metadata

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("threads", "ending"), [(1, "1 torch thread)"), (4, "4 torch threads)")])
def test_device_name_counts_its_threads(monkeypatch, threads, ending):
    import torch  # lazy: the module under test imports it lazily too

    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    monkeypatch.setattr(metadata, "cpu_name", lambda: "AMD EPYC")
    name = metadata.device_name("cpu")
    assert name.startswith("CPU: AMD EPYC (") and name.endswith(f" cores, {ending}")


def test_old_device_names_read_as_todays():
    old = "CPU: AMD EPYC (2 cores, 1 torch threads)"
    assert normalise_device_name(old) == "CPU: AMD EPYC (2 cores, 1 torch thread)"
    for kept in (
        "CPU: AMD EPYC (2 cores, 1 torch thread)",
        "CPU: Xeon (16 cores, 11 torch threads)",
        "CPU: Xeon (16 cores, 4 torch threads)",
        "NVIDIA H200",
    ):
        assert normalise_device_name(kept) == kept
    assert normalise_device_name(None) is None
    assert pd.isna(normalise_device_name(pd.NA))


def test_the_report_reads_the_old_wording_as_the_new():
    source = REPO / "results" / "demo" / "demo.csv"  # written when it said "1 torch threads"
    assert "1 torch threads" in source.read_text(encoding="utf-8")
    frame = read_results_csv(source)
    assert set(frame.device_name) == {"CPU: AMD EPYC (2 cores, 1 torch thread)"}
