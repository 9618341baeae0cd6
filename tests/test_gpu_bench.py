"""make gpu-bench's records: compiled timings that time real work, decode floors at one bandwidth,
what the engine ran, the forecast's arithmetic and sources, the drafter profile; the script's
CPU dry run end to end (as CI runs it)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cactus_bench.bench import gpu_forecast as fc
from cactus_bench.bench.gpu_compiled import EmptyGraph, compile_checked
from cactus_bench.bench.gpu_costs import decode_bytes
from cactus_bench.bench.gpu_engine import NOT_REPORTED, RULE_IN_VERIFY, STATS_COLUMNS, what_ran
from cactus_bench.bench.gpu_profile import attention_backend

REPO = Path(__file__).resolve().parents[1]


def test_a_compiled_function_that_returns_nothing_is_refused():
    """Inductor drops every op of a function returning None: timing it would time nothing."""
    x = torch.randn(64)

    def returns_nothing():
        (x * 2).softmax(0).cumsum(0)

    def returns_its_output():
        return (x * 2).softmax(0).cumsum(0)

    torch._dynamo.reset()
    with pytest.raises(EmptyGraph, match="no ops"):
        compile_checked(returns_nothing)
    compiled, ops, _ = compile_checked(returns_its_output)
    assert ops >= 3 and torch.allclose(compiled(), returns_its_output())


@pytest.mark.slow
def test_the_benchs_compiled_rule_keeps_its_ops():
    from cactus_bench.bench.gpu_costs import verify_costs

    rows = verify_costs([("sps", {})], torch.device("cpu"), 64, [1], [2], 2, [("sps", 1, 2)])
    (compiled,) = [row for row in rows if row["path"] == "compiled"]
    assert compiled["note"] == "" and compiled["seconds"] > 0 and compiled["compiled_ops"] > 20


def test_decode_bytes_leave_out_an_untied_input_embedding(tiny_pair):
    drafter, _, _ = tiny_pair
    every = sum(p.numel() * p.element_size() for p in drafter.parameters())
    embedding = drafter.get_input_embeddings().weight
    tied = drafter.get_output_embeddings().weight.data_ptr() == embedding.data_ptr()
    expected = every if tied else every - embedding.numel() * embedding.element_size()
    assert decode_bytes(drafter) == expected
    untied = torch.nn.Module()
    untied.embed, untied.head = torch.nn.Embedding(100, 8), torch.nn.Linear(8, 100, bias=False)
    untied.get_input_embeddings = lambda: untied.embed
    untied.get_output_embeddings = lambda: untied.head
    assert decode_bytes(untied) == 100 * 8 * 4  # the head only
    untied.head.weight = untied.embed.weight  # tied: the head is the embedding, read once
    assert decode_bytes(untied) == 100 * 8 * 4


def test_what_ran_comes_from_the_engine_never_the_setting():
    class Silent:
        cuda_graphs = True  # asked for: says nothing of what ran

    cells = what_ran(Silent())
    assert all(cells[column] is None for column in STATS_COLUMNS)
    assert cells["stats_note"] == NOT_REPORTED

    class Reporting(Silent):
        def device_stats(self):
            phases = {"draft": 11.5, "verify": 8.2, "rule": 0.8, "other": 4.6}
            counts = {"graph_replays": 0, "eager_forwards": 9, "capture_failed": True}
            return {**counts, "phase_ms": phases}

    cells = what_ran(Reporting())
    ran = (cells["graph_replays"], cells["eager_forwards"], cells["capture_failed"])
    assert ran == (0, 9, True)
    assert (cells["draft_ms"], cells["rule_ms"], cells["other_ms"]) == (11.5, 0.8, 4.6)
    assert cells["stats_note"] == ""

    class Captured(Silent):  # the rule ran inside the verify graph: no time of its own
        def device_stats(self):
            phases = {"draft": 3.0, "verify": 9.0, "rule": None, "other": 0.4}
            return {
                "graph_replays": 2,
                "eager_forwards": 0,
                "capture_failed": False,
                "phase_ms": phases,
            }

    cells = what_ran(Captured())
    assert cells["rule_ms"] is None and cells["stats_note"] == RULE_IN_VERIFY


def _rows(**columns) -> list[dict]:
    keys = list(columns)
    columns_together = zip(*columns.values(), strict=True)
    return [dict(zip(keys, map(str, values), strict=True)) for values in columns_together]


def synthetic_costs():
    """Forwards: drafter 2 ms; verifier 6 ms + 0.5 ms a token; rule 1 ms; engine: verifier step
    8 ms (o_step 2 ms), sps m = 4 step 4*2 + 8 + 1 + 2 + 4*0.5 = 21 ms (o_draft 0.5 ms)."""
    forwards = _rows(
        role=["drafter", "verifier", "verifier", "large", "large"],
        path=["graph"] * 5,
        batch=[1] * 5,
        tokens_per_row=[1, 1, 5, 1, 21],
        seconds=[0.002, 0.0065, 0.0085, 0.010, 0.020],
    )
    verifies = _rows(
        rule=["sps", "sps"], path=["eager"] * 2, batch=[1, 1], m=[2, 20], seconds=[0.001] * 2
    )
    engines = _rows(
        arm=["verifier", "sps", "sps"],
        m=[0, 4, 20],
        batch=[1, 1, 1],
        mean_step_s=[0.0085, 0.0215, 0.0],
        device=["card"] * 3,
    )
    return forwards, verifies, engines


def test_forecast_adds_the_rule_and_the_measured_overhead():
    forwards, verifies, engines = synthetic_costs()
    costs = fc.costs_from_rows(forwards, verifies, engines)
    assert costs.step_overhead_s == pytest.approx(0.002)
    assert costs.draft_overhead_s == pytest.approx(0.0005)
    # m = 20 on "large": 20 (2 + 0.5) + 20 (measured n = 21) + 1 + 2 = 73 ms; a token 12 ms
    assert costs.spec_step_s("large", "sps", 20) == pytest.approx(0.073)
    assert costs.speedup("large", "sps", 20, al=7.0) == pytest.approx(8 * 0.012 / 0.073)
    engines[2]["mean_step_s"] = str(20 * 0.0025 + 0.0165 + 0.001 + 0.002)  # the model's own
    (check,) = fc.engine_check(costs, engines)
    assert check["m"] == 20 and check["within_10pct"] and abs(check["gap"]) < 1e-9
    engines[2]["mean_step_s"] = "0.09"  # the engine slower than the model: the gap shows
    (check,) = fc.engine_check(costs, engines)
    assert not check["within_10pct"] and check["gap"] < -0.1


def test_each_forecast_names_its_acceptance_and_whether_n_was_measured():
    costs = fc.costs_from_rows(*synthetic_costs())
    accept = fc.Acceptance("paper, gsm8k", "sps", 7.0, "Table 1")
    (row,) = fc.cell_forecast(costs, "large", 20, [accept], "Qwen3-14B")
    assert row["acceptance_source"] == "Table 1" and row["verify_forward"] == "measured"
    (row,) = fc.cell_forecast(costs, "large", 10, [accept])
    assert row["verify_forward"] == "linear in n, not measured"
    text = "\n".join(fc.report_lines(costs, [], [row]))
    assert "AL of paper, gsm8k: Table 1" in text and "no engine step beside" in text


def test_interpolate_is_linear_and_says_what_was_measured():
    points = [(1, 10.0), (5, 14.0)]
    assert fc.interpolate(points, 5) == (14.0, True)
    assert fc.interpolate(points, 3) == (12.0, False)
    assert fc.interpolate(points, 21) == (30.0, False)


def test_the_committed_costs_forecast_the_documented_cell():
    """docs/gpu.md quotes these from the committed H200 files (a changed CSV must change both)."""
    folder = REPO / "results/bench"
    names = ("gpu_forward.csv", "gpu_verify.csv", "gpu_engine.csv")
    forwards, verifies, engines = (fc.read_rows(folder / name) for name in names)
    costs = fc.costs_from_rows(forwards, verifies, engines)
    gsm8k = costs.speedup("large", "cactus", 20, 7.00)
    gpqa = costs.speedup("large", "cactus", 20, 6.74)
    assert (round(gpqa, 2), round(gsm8k, 2)) == (1.02, 1.06)
    committed = list(csv.DictReader((folder / "gpu_forecast.csv").open(encoding="utf-8")))
    shown = {row["acceptance"]: round(float(row["forecast_speedup"]), 2) for row in committed}
    assert shown["paper cactus delta 1 gsm8k"] == 1.06


def test_embedded_acceptance_names_its_sweep(tmp_path):
    sweep = tmp_path / "sweep.csv"
    rows = _rows(
        sampler=["cactus", "cactus", "sps"],
        task=["demo"] * 3,
        delta=[1.0, 1.0, ""],
        batch=[1, 1, 1],
        m=[2.0, 3.0, 3.0],
        al=[0.9, 1.1, 0.6],
        drafter_id=["d"] * 3,
        verifier_id=["v"] * 3,
        git_sha=["abcdef123"] * 3,
    )
    with sweep.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    accept = fc.embedded_acceptance(sweep)
    assert (accept.al, accept.measured_at_m, accept.rule) == (1.1, 3, "cactus")
    assert "sweep.csv" in accept.source and "m = 3" in accept.source


def test_attention_backend_from_names():
    assert attention_backend(["aten::_scaled_dot_product_flash_attention"]) == "flash"
    cpu = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert attention_backend(["aten::scaled_dot_product_attention", cpu]) == "flash (CPU kernel)"
    assert attention_backend(["aten::_scaled_dot_product_efficient_attention"]) == "efficient"
    assert attention_backend(["void cudnn_sdpa_fwd_kernel<...>"]) == "cudnn"
    assert attention_backend(["aten::_scaled_dot_product_attention_math"]) == "math"
    assert attention_backend(["gemv", "softmax_warp_forward"]) == "math (softmax kernel)"
    assert attention_backend(["gemv"]) == "unknown"


@pytest.mark.slow
def test_dry_run_writes_every_record(tmp_path):
    """`make gpu-bench DRY=1` (CI): every stage on the CPU; records that cannot mislead."""
    done = subprocess.run(
        [sys.executable, "scripts/gpu_bench.py", "--dry", "--out-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "gpu_bench.json").read_text())
    assert next(iter(summary)) == "tree" and summary["tree"].split()[0] in {"clean", "dirty"}
    assert summary["drafter_profile"]["attention_backend"] != "unknown"
    assert any(line.startswith("  AL of paper") for line in summary["forecast"])
    engine = list(csv.DictReader((tmp_path / "gpu_engine.csv").open(encoding="utf-8")))
    assert {(row["arm"], row["m"]) for row in engine} >= {("sps", "20"), ("cactus", "4")}
    assert "cuda_graphs" not in engine[0]
    for row in engine:  # a note says why a cell is empty; a fully reported row needs none
        assert bool(row["stats_note"]) == any(row[column] == "" for column in STATS_COLUMNS), row
    forwards = list(csv.DictReader((tmp_path / "gpu_forward.csv").open(encoding="utf-8")))
    assert {row["tokens_per_row"] for row in forwards if row["role"] == "large"} >= {"21"}
    verify = list(csv.DictReader((tmp_path / "gpu_verify.csv").open(encoding="utf-8")))
    (compiled,) = [row for row in verify if row["path"] == "compiled"]
    assert int(compiled["compiled_ops"]) > 20
    # One bandwidth for both floors: bytes / floor agree between a forward and a rule.
    from cactus_bench.models.tiny import make_tiny_pair

    drafter = make_tiny_pair(seed=0)[0]
    (forward,) = [r for r in forwards if r["role"] == "drafter"][:1]
    forward_bw = decode_bytes(drafter) / float(forward["floor_s"])
    rule_bw = float(verify[0]["law_bytes"]) / float(verify[0]["floor_s"])
    assert forward_bw == pytest.approx(rule_bw, rel=1e-9)
    assert "forecast on cpu (dry run)" in done.stdout and "engine check, sps m = 20" in done.stdout
