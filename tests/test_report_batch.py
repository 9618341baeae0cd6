"""The batch sweep's report: best m per batch, the crossover batch, the step-cost model (it
recovers known costs from synthetic steps) and the forecast from another device's cost table,
then the whole report from a real tiny sweep."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.runs import compose_cfg, compose_run_conf, tiny_conf

from cactus_bench.report.batch import best_m, crossover, heldout_jobs
from cactus_bench.report.batch_cost import (
    StepCosts,
    costs_from_table,
    fit_costs,
    forecast,
    predicted_speedup,
    tokens_per_row_step,
)
from cactus_bench.report.batch_page import write_batch_report
from cactus_bench.run import rule_params_of, run


def _row(rule, batch, m, speedup, low, high):
    return dict(
        task="demo", rule=rule, sampler=rule, batch=batch, m=m, speedup_tokens=speedup,
        speedup_tokens_ci_low=low, speedup_tokens_ci_high=high,
    )  # fmt: skip


def test_best_m_and_the_crossover_batch():
    rows = pd.DataFrame(
        [
            _row("sps", 1, 1, 1.10, 1.02, 1.20),
            _row("sps", 1, 2, 0.95, 0.90, 1.01),
            _row("sps", 4, 1, 0.97, 0.90, 1.03),  # interval holds 1: no crossover yet
            _row("sps", 8, 1, 0.80, 0.75, 0.86),  # wholly below 1: the crossover
            _row("sps", 16, 1, 0.70, 0.60, 0.80),
            _row("cactus", 1, 2, 1.30, 1.20, 1.40),
            _row("cactus", 16, 3, 1.05, 0.98, 1.12),
        ]
    )
    chosen = best_m(rows)
    assert chosen[(chosen.rule == "sps") & (chosen.batch == 1)].m.item() == 1
    says = crossover(chosen, [1, 4, 8, 16]).set_index("rule").says
    assert says["sps"] == "batch 8" and says["cactus"] == "none up to 16"


def test_a_held_out_task_keeps_the_m_the_selection_task_chose():
    ifeval = [dict(r, task="ifeval") for r in (
        _row("sps", 1, 1, 0.90, 0.80, 1.00),  # demo chose m = 1 at batch 1: kept, though lower
        _row("sps", 1, 2, 1.50, 1.40, 1.60),
        _row("cactus", 16, 3, 1.01, 0.90, 1.10),
    )]  # fmt: skip
    demo = [_row("sps", 1, 1, 1.10, 1.02, 1.20), _row("sps", 1, 2, 0.95, 0.90, 1.01)]
    demo.append(_row("cactus", 16, 3, 1.05, 0.98, 1.12))
    chosen = best_m(pd.DataFrame(demo + ifeval), "demo").set_index(["task", "rule", "batch"])
    assert chosen.m.to_dict() == {
        ("demo", "cactus", 16): 3, ("demo", "sps", 1): 1,
        ("ifeval", "cactus", 16): 3, ("ifeval", "sps", 1): 1,
    }  # fmt: skip
    assert chosen.loc[("ifeval", "sps", 1)].speedup_tokens == 0.90


def test_held_out_jobs_rebuild_each_chosen_rule_exactly():
    """Every rule of the sweep, as its preset builds it, comes back from the job's overrides."""
    presets = compose_cfg(
        ["experiment=batch_sweep"], hydra_node=True
    ).hydra.sweeper.params.sampler.split(",")
    rows = []
    for batch, preset in enumerate(p for p in presets if p != "verifier"):
        chosen = rule_params_of(compose_run_conf([f"sampler={preset}"]))
        row = _row(chosen.rule, 2**batch, 1 + batch % 3, 1.2, 1.1, 1.3)
        rows.append(dict(row, rule=preset, sampler_params=json.dumps(chosen.runs_with())))
    jobs = heldout_jobs(pd.DataFrame(rows), "demo")
    assert jobs[0] == ["sampler=verifier", "batch=1", "m=1"] and len(jobs) == 2 * len(rows)
    by_batch = {job[-2]: job for job in jobs[len(rows) :]}  # one rule per batch here
    for row in rows:
        job = by_batch[f"batch={row['batch']}"]
        assert job[-1] == f"m={row['m']}"
        chosen = rule_params_of(compose_run_conf(job))
        ran = (chosen.rule, json.dumps(chosen.runs_with()))
        assert ran == (row["sampler"], row["sampler_params"])
    with pytest.raises(ValueError, match="experiment=batch_sweep"):
        heldout_jobs(pd.DataFrame(rows).assign(task="ifeval"), "demo")


def test_the_makefiles_two_halves_run_every_sampler_of_the_sweep_once():
    makefile = (Path(__file__).resolve().parents[1] / "Makefile").read_text(encoding="utf-8")
    block = makefile.split("BATCH_SWEEP_HALVES :=", 1)[1].split("\n\n", 1)[0]
    halves = [part.split(",") for part in re.findall(r"sampler=(\S+)", block)]
    swept = compose_cfg(
        ["experiment=batch_sweep"], hydra_node=True
    ).hydra.sweeper.params.sampler.split(",")
    assert len(halves) == 2 and sorted(halves[0] + halves[1]) == sorted(swept)


def _steps(costs: StepCosts, noise: float, seed: int = 0) -> list[dict]:
    """Synthetic decode steps whose times follow `costs` (plus a little noise)."""
    rng = np.random.default_rng(seed)
    line = {k: [] for k in ("kind", "rows", "fed", "drafts", "verify_s", "draft_s", "rule_s")}
    for rows in (2, 3, 4, 6, 8, 12, 16):
        for m in (1, 2, 3):
            fed = rows * (m + 1)
            line["kind"].append("decode")
            line["rows"].append(rows)
            line["fed"].append(fed)
            line["drafts"].append(m)
            jitter = 1 + noise * rng.standard_normal(3)
            line["verify_s"].append(costs.verify_s(rows, fed) * jitter[0])
            line["draft_s"].append(m * costs.draft_s(rows) * jitter[1])
            line["rule_s"].append(costs.rule_s(rows) * jitter[2])
    return [{"run_id": "r", "arm": "spec", **line}]


def test_the_cost_fit_recovers_known_costs_and_predicts_their_speedup():
    truth = StepCosts(verify=(0.02, 0.004, 0.001), draft=(0.005, 0.0008), rule=(0.001, 0.0002))
    no_batch_one = pd.DataFrame(columns=["batch", "sampler", "num_steps", "verify_time_s"])
    fitted = fit_costs(no_batch_one, _steps(truth, noise=0.0))
    for got, want in ((fitted.verify, truth.verify), (fitted.draft, truth.draft)):
        assert np.allclose(got, want, rtol=1e-6)
    # by hand at 8 rows, m = 2, 1.9 tokens a row-step, no prefill
    spec = 2 * truth.draft_s(8) + truth.verify_s(8, 24) + truth.rule_s(8)
    base = truth.verify_s(8, 8) + truth.rule_s(8)
    expected = (base / 8) / (spec / (8 * 1.9))
    assert predicted_speedup(fitted, 2, 8, 1.9, (0.0, 0.0)) == pytest.approx(expected, rel=1e-6)
    noisy = fit_costs(no_batch_one, _steps(truth, noise=0.05, seed=1))
    assert predicted_speedup(noisy, 2, 8, 1.9, (0, 0)) == pytest.approx(expected, rel=0.05)
    assert tokens_per_row_step(json.dumps([0.6, None])) == pytest.approx(1.6)


def test_a_cost_table_from_another_device_gives_a_labelled_forecast():
    """FABRICATED cost table (not a measurement): a device whose verify cost is flat in the
    batch until it saturates gives a forecast that shrinks with the batch."""
    rows = []
    for batch in (1, 8, 32, 64):
        for tokens in (1, 3):
            work = batch * tokens
            rows.append(("FABRICATED gpu", "verifier", batch, tokens, 0.02 + 0.0002 * work))
        rows.append(("FABRICATED gpu", "drafter", batch, 1, 0.004 + 0.00001 * batch))
    table = pd.DataFrame(rows, columns=["device", "model", "batch", "tokens_per_row", "seconds"])
    costs = costs_from_table(table)
    chosen = pd.DataFrame(
        [dict(task="demo", rule="cactus", m=2, batch=1, accept_rate_by_pos="[0.6, 0.4]")]
    )
    ahead = forecast(chosen, costs, [1, 8, 32, 64], "sweep.csv")
    assert set(ahead.kind) == {"forecast"} and set(ahead.device) == {"FABRICATED gpu"}
    speedups = ahead.sort_values("batch").forecast_speedup.to_numpy()
    assert speedups[0] > 1 and np.all(np.diff(speedups) < 0)
    # Without rule and overhead rows the table says they count 0; each row names its acceptance.
    assert set(ahead.costs_note) == {costs.note} and "rule" in costs.note
    assert ahead.acceptance_source.str.startswith("sweep.csv: ").all()
    # With them, a speculative step pays the rule and m draft overheads, both arms o_step.
    parts = {"step_overhead": 0.002, "draft_overhead": 0.001, "rule": 0.001}
    extra = [("FABRICATED gpu", model, 1, 2, seconds) for model, seconds in parts.items()]
    full = costs_from_table(pd.concat([table, pd.DataFrame(extra, columns=table.columns)]))
    assert full.note == "" and full.spec_rule_s(1) == pytest.approx(0.001)
    assert full.draft_s(1) == pytest.approx(costs.draft_s(1) + 0.001)
    spec = 2 * full.draft_s(1) + full.verify_s(1, 3) + 0.002 + 0.001
    base = full.verify_s(1, 1) + 0.002
    each = tokens_per_row_step("[0.6, 0.4]")
    assert predicted_speedup(full, 2, 1, each, (0, 0)) == pytest.approx(each * base / spec)


@pytest.mark.slow
def test_the_report_of_a_tiny_sweep(tmp_path):
    """Verifier, SpS and Cactus at batch 1 and 2 on the tiny pair: every file is written, the
    table names the machine, and the cost model compares every speculative row."""
    for batch in (1, 2):
        for sampler in ("verifier", "sps", "cactus"):
            overrides = (f"sampler={sampler}", f"batch={batch}", "limit=4", "m=2")
            assert run(tiny_conf(tmp_path, *overrides, "experiment_name=batch")).status == "ok"
    csv = tmp_path / "results" / "batch.csv"
    written = write_batch_report(csv, tmp_path / "out", formats=("png",))
    names = {path.name for path in written}
    assert {"batch_all_m.csv", "batch_best_m.csv", "batch.md", "batch_cost.csv"} <= names
    assert "speedup_vs_batch.png" in names
    text = (tmp_path / "out" / "batch.md").read_text()
    assert "Timed on CPU" in text and "crossover" in text and "Step-cost model" in text
    compared = pd.read_csv(tmp_path / "out" / "batch_cost.csv")
    assert len(compared) == 4 and compared.predicted.gt(0).all()


VLLM_SWEEP = Path(__file__).resolve().parents[1] / "results/batch_vllm/batch_sweep.csv"


def test_a_sweep_of_two_engines_is_refused_in_one_line():
    """The committed vLLM-beside-HF sweep holds cactus rows of both engines (and vLLM's own
    acceptance paths): one page would mix them in one cell, so it is refused, naming the fix."""
    with pytest.raises(ValueError, match=r"mixes engines \(hf/rule, vllm/rule, vllm/vllm, "):
        write_batch_report(VLLM_SWEEP, Path("unused"))


def test_a_vllm_only_sweep_gets_its_page_without_a_cost_model(tmp_path):
    """vLLM rows time no phase apart, so no cost model can be fitted: the page says so instead
    of failing on the empty timings; the table still has both rules at both batches."""
    rows = pd.read_csv(VLLM_SWEEP)
    rows[(rows.backend == "vllm") & rows.acceptance.isna()].to_csv(tmp_path / "s.csv", index=False)
    write_batch_report(tmp_path / "s.csv", tmp_path / "out", formats=("png",))
    page = (tmp_path / "out/batch.md").read_text(encoding="utf-8")
    assert "No step-cost model: these rows time no draft, verify or rule phase apart" in page
    assert re.search(r"\| sps \| 1\.10x \[1\.02, 1\.20\] \(m=2\) \| 0\.92x", page)
    assert not (tmp_path / "out/batch_cost.csv").exists()
