"""Waves through the whole run path (tiny random pair, fp32): a slowdown injected into one arm
marks the row with one console line; a run killed after wave k resumes to the same row; a cached
baseline records its machine and is refused once stale."""

from __future__ import annotations

import json

import pytest
from helpers.runs import COUNTED, csv_rows, tiny_conf

from cactus_bench.run import format_outcome, run
from cactus_bench.run.baseline import StaleBaseline

pytestmark = pytest.mark.slow
WAVED = ("temperature=0", "model.dtype=float32", "limit=6", "max_new_tokens=10", "batch=2")


def patch_generate_batch(monkeypatch, wrap):
    """Replace the engine's generate_batch; `wrap(real, decoder, requests, size, on_finish)`
    runs for every journaled call (the warm-up, without on_finish, runs as it is)."""
    from cactus_bench.engine import batched

    real = batched.generate_batch

    def patched(decoder, requests, batch, on_finish=None):
        if on_finish is None:
            return real(decoder, requests, batch)
        return wrap(real, decoder, requests, batch, on_finish)

    monkeypatch.setattr(batched, "generate_batch", patched)


def test_a_baseline_slowed_halfway_marks_the_row_with_one_warning_line(tmp_path, monkeypatch):
    waves = []

    def slow_baseline_late(real, decoder, requests, batch, on_finish):
        if decoder.num_draft_tokens == 0:
            waves.append(len(requests))
        slowed = decoder.num_draft_tokens == 0 and len(waves) > 1  # 3 waves: the last two

        def finish(index, record):
            if slowed:  # a fake clock: the machine runs at a third of its speed
                record.share_time_s *= 3
                record.total_time_s *= 3
            on_finish(index, record)

        return real(decoder, requests, batch, finish)

    patch_generate_batch(monkeypatch, slow_baseline_late)
    outcome = run(tiny_conf(tmp_path, "sampler=cactus", *WAVED))
    (row,) = csv_rows(outcome.csv_path)
    assert row["waves"] == "3" and row["drift_marked"] == "true"
    # the fake clock divides the baseline's late rate by 3 (drift -2/3) on top of the real clock's
    # own drift, which a loaded machine moves by up to ~0.2 (seen: -0.80, -0.82)
    assert -0.9 < float(row["baseline_drift"]) < -0.45
    assert abs(float(row["spec_drift"])) < 0.5  # the run's own arm was not slowed
    assert row["drift_threshold"] == "0.1" and row["load_spec_start"] != ""
    state = json.loads(row["machine_state_json"])
    assert set(state) >= {"spec", "baseline"} and state["spec"]["end"]["time"] > 0
    printed = format_outcome(outcome).splitlines()
    warnings = [line for line in printed if "machine drift" in line]
    assert len(warnings) == 1 and outcome.run_id in warnings[0]


@pytest.mark.parametrize("calls", [2, 3], ids=["after_wave_1", "mid_wave_2"])
def test_a_run_killed_after_a_wave_resumes_to_the_same_row(tmp_path, monkeypatch, capsys, calls):
    whole = run(tiny_conf(tmp_path / "whole", "sampler=sps", *WAVED))
    (expected,) = csv_rows(whole.csv_path)
    done = []

    def killed_after(real, decoder, requests, batch, on_finish):
        if len(done) == calls:
            raise RuntimeError("killed")
        done.append(len(requests))
        return real(decoder, requests, batch, on_finish)

    patch_generate_batch(monkeypatch, killed_after)
    conf = tiny_conf(tmp_path / "killed", "sampler=sps", *WAVED)
    with pytest.raises(RuntimeError, match="killed"):
        run(conf)
    monkeypatch.undo()
    capsys.readouterr()
    resumed = run(conf)
    assert f"resume: {2 * calls} requests replayed" in capsys.readouterr().out
    row = next(r for r in csv_rows(resumed.csv_path) if r["status"] == "ok")
    assert {c: row[c] for c in COUNTED} == {c: expected[c] for c in COUNTED}
    assert row["waves"] == expected["waves"] == "3"


def test_a_cached_baseline_records_the_gap_and_is_refused_when_stale(tmp_path):
    first = run(tiny_conf(tmp_path, "sampler=sps", "baseline=cached", *WAVED))
    (row,) = csv_rows(first.csv_path)
    assert row["baseline_age_s"] != "" and float(row["baseline_age_s"]) > -60
    assert row["load_baseline_start"] != "" and row["baseline_load_gap"] != ""
    (cached,) = (tmp_path / "results" / "baselines").glob("*[0-9a-f].json")
    payload = json.loads(cached.read_text())
    assert payload["meta"]["machine_state"]["machine"]["cpu"]
    payload["meta"]["machine_state"]["end"]["time"] -= 48 * 3600  # decoded two days ago
    cached.write_text(json.dumps(payload))
    with pytest.raises(StaleBaseline) as refused:
        run(tiny_conf(tmp_path, "sampler=cactus", "baseline=cached", *WAVED))
    line = str(refused.value)
    assert "\n" not in line and "baseline_max_age_h=24" in line and f"rm {cached}" in line
    later = run(
        tiny_conf(tmp_path, "sampler=cactus", "baseline=cached", "baseline_max_age_h=72", *WAVED)
    )
    assert later.status == "ok"
    (_, _, reused) = csv_rows(later.csv_path)  # sps, the refused row, this one
    assert float(reused["baseline_age_s"]) > 47 * 3600
