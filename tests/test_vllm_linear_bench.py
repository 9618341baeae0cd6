"""scripts/bench_vllm_linear.py against the real vLLM CPU build (runs in `make test-vllm`)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vLLM: make setup-vllm, then make test-vllm")

from cactus_bench.engine.cpu_kernels import cpu_info  # noqa: E402

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        not cpu_info().onednn_bf16,
        reason="oneDNN runs no bf16 products on this CPU (no AVX512-BW/VL/DQ): nothing to compare",
    ),
]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_vllm_linear.py"


OLD_LAYOUT = (  # a row written before the git_dirty column existed
    "timestamp,git_sha,cpu,isa,dtype,case,rows,kernel,stat,value\n"
    "2026-12-01T02:58:15+0000,9c53d7e,some cpu,AVX512,bfloat16,"
    "call_us,1,vllm onednn_mm,median,9.5\n"
)


def test_bench_vllm_linear_times_both_kernels_and_appends(tmp_path):
    out = tmp_path / "linear.csv"
    out.write_text(OLD_LAYOUT)
    for _ in range(2):  # the second run appends under the same header
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--repeats", "3", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    old, *rows = list(csv.DictReader(out.open()))
    assert old["git_dirty"] == "" and old["value"] == "9.5"  # kept, its dirty flag unknown
    assert {row["git_dirty"] for row in rows} <= {"True", "False"}
    kernels = {"torch packed (HF engine)", "vllm onednn_mm"}
    # per run: 2 kernels x (sweeps at 1, 3, 8 rows + one tiny call) x (median, q25, q75)
    assert len(rows) == 2 * 2 * 4 * 3
    assert {row["kernel"] for row in rows} == kernels
    assert {(row["case"], row["rows"]) for row in rows} == {
        ("sweep_ms", "1"),
        ("sweep_ms", "3"),
        ("sweep_ms", "8"),
        ("call_us", "1"),
    }
    for row in rows:
        assert float(row["value"]) > 0 and row["cpu"] and row["dtype"] == "bfloat16"
    stats = {}  # (run, case, rows, kernel) -> {stat: value}
    for row in rows:
        key = (row["timestamp"], row["case"], row["rows"], row["kernel"])
        stats.setdefault(key, {})[row["stat"]] = float(row["value"])
    for q in stats.values():  # each median lies within its quartiles
        assert q["q25"] <= q["median"] <= q["q75"]
