"""Waves and drift: at batch > 1 the arms alternate wave by wave with the same tokens as decoding
every request at once; a slowdown in one arm marks the row; the wave bootstrap's draws; cached
baselines carry their machine and are refused when stale (tiny random pair, fp32, greedy)."""

from __future__ import annotations

import numpy as np
import pytest
from lm_eval.api.instance import Instance

from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
from cactus_bench.samplers import make_sampler
from cactus_bench.store.bootstrap import wave_resample_counts
from cactus_bench.store.drift import drift, drift_columns, drift_warning, wave_of_records
from cactus_bench.store.machine_state import cached_refusal
from cactus_bench.tasks.lm import CactusBenchLM

pytestmark = pytest.mark.usefixtures("single_thread")
GREEDY = SamplingParams(temperature=0.0)


def fake_records(n: int, batch: int, seconds_per_step, steps=lambda i: 10 + 3 * (i % 4)):
    """n records of a run at `batch`; `seconds_per_step(wave)` sets the machine's speed."""
    records = []
    waves = wave_of_records(n, n, batch)
    for index in range(n):
        count = steps(index)
        wave_steps = max(steps(j) for j in range(n) if waves[j] == waves[index])
        # a request's share of its wave: the wave's steps at this speed, split over its rows
        share = wave_steps * seconds_per_step(waves[index]) / waves.count(waves[index])
        records.append(
            {
                "accepted_per_step": [0] * count,
                "output_ids": [1] * count,
                "batch_size": batch,
                "share_time_s": share,
                "total_time_s": share,
            }
        )
    return records


@pytest.mark.parametrize("batch", [1, 4])
def test_a_slowdown_in_one_arm_marks_the_row_and_a_steady_machine_does_not(batch):
    steady = fake_records(16, batch, lambda wave: 0.05)
    # the machine gets 1.5x slower halfway through the baseline's waves
    halfway = len(set(wave_of_records(16, 16, batch))) // 2
    slowed = fake_records(16, batch, lambda wave: 0.05 * (1.5 if wave >= halfway else 1.0))
    calm = drift_columns(steady, steady, 16, batch, threshold=0.1)
    assert calm["drift_marked"] is False and calm["baseline_drift"] == pytest.approx(0.0)
    marked = drift_columns(steady, slowed, 16, batch, threshold=0.1)
    assert marked["drift_marked"] is True
    assert marked["baseline_drift"] == pytest.approx(1 / 1.5 - 1)
    assert marked["waves"] == 16 // batch
    row = {**marked, "run_id": "r1", "sampler": "cactus", "batch": batch, "drift_threshold": 0.1}
    warning = drift_warning(row)
    assert "\n" not in warning and "r1" in warning and "baseline -33%" in warning
    assert drift_warning({**row, "drift_marked": False}) is None


def test_drift_is_empty_with_one_wave_and_ignores_wave_content():
    assert drift(fake_records(4, 8, lambda wave: 0.05), 4, 8) is None
    # waves of very different lengths on a steady machine: the step rate does not move
    uneven = fake_records(16, 4, lambda wave: 0.05, steps=lambda i: 5 if i < 8 else 40)
    assert drift(uneven, 16, 4) == pytest.approx(0.0)


def test_wave_resample_draws_whole_waves_then_prompts_within_them():
    waves = [0, 0, 0, 1, 1, 1, 2]  # 7 prompts at batch 3
    counts = wave_resample_counts(waves, 400, np.random.default_rng(3))
    assert counts.shape == (400, 7)
    # each resample draws 3 waves and, within each, as many prompts as it holds
    assert set(counts.sum(axis=1)) <= {3.0, 5.0, 7.0, 9.0}
    assert counts[:, 6].max() <= 3  # the one-prompt wave: at most once per wave drawn
    assert (counts[:, :3].sum(axis=1) % 3 == 0).all()  # wave 0 comes in threes


def test_a_cached_baseline_too_old_or_from_another_machine_is_refused_in_one_line():
    here = {"host": "a", "cpu": "Xeon", "device": "CPU: Xeon (2 cores, 1 torch thread)"}
    state = {"machine": here, "start": {"time": 1000.0}, "end": {"time": 2000.0}}
    refresh = "rm x.json to decode a fresh one"
    assert cached_refusal({"machine_state": state}, here, 24, refresh, now=2000.0 + 3600) == ""
    old = cached_refusal({"machine_state": state}, here, 24, refresh, now=2000.0 + 25 * 3600)
    assert "25.0 h old" in old and "baseline_max_age_h=24" in old and refresh in old
    elsewhere = {**here, "cpu": "EPYC"}
    moved = cached_refusal({"machine_state": state}, elsewhere, 24, refresh, now=2000.0)
    assert "another machine" in moved and "'Xeon'" in moved
    assert cached_refusal({"machine_state": state}, {**here, "host": "b"}, 24, refresh, 2000) == ""
    assert "no machine state" in cached_refusal({}, here, 24, refresh)
    assert all("\n" not in line for line in (old, moved))


class CallLog:
    """Wraps a decoder; logs (arm, prompt seeds) of each generate_batch call."""

    def __init__(self, decoder, arm: str, log: list):
        self.decoder, self.arm, self.log = decoder, arm, log

    def generate_batch(self, requests, batch, on_finish=None):
        self.log.append((self.arm, [r.seed for r in requests]))
        return self.decoder.generate_batch(requests, batch, on_finish=on_finish)

    def __getattr__(self, name):
        return getattr(self.decoder, name)


def test_waves_alternate_the_arms_and_give_each_request_its_all_at_once_tokens(tiny_pair):
    drafter, verifier, tok = tiny_pair
    spec = SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        make_sampler("cactus", delta=1.0),
        num_draft_tokens=3,
        sampling=GREEDY,
        eos_token_ids=[],
    )
    base = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[])
    contexts = ["ab", "hello there", "a longer prompt of text", "x", "the end", "q"]
    instances = [
        Instance("generate_until", {}, (text, {"until": [], "max_gen_toks": 6 + 2 * i}), i)
        for i, text in enumerate(contexts)
    ]
    log: list = []
    lm = CactusBenchLM(
        CallLog(spec, "spec", log), tok, baseline=CallLog(base, "baseline", log), batch=4
    )
    lm.show_progress = False
    lm.generate_until(instances)
    seeds = [r.seed for r in lm.records]
    # wave 0: spec first; wave 1: the baseline first (4 requests, then the last 2)
    assert log == [
        ("spec", seeds[:4]),
        ("baseline", seeds[:4]),
        ("baseline", seeds[4:]),
        ("spec", seeds[4:]),
    ]
    requests = [lm._request(*inst.args, index) for index, inst in enumerate(instances)]
    for decoder, kept in ((spec, lm.records), (base, lm.baseline_records)):
        at_once = decoder.generate_batch(requests, 4)  # how batch > 1 decoded before waves
        assert [r.output_ids for r in kept] == [r.output_ids for r in at_once]


def test_the_report_marks_a_drifted_row_and_old_rows_load_unmarked(tmp_path):
    import pandas as pd
    from intervals_fixture import FIXTURE

    from cactus_bench.report import aggregate, load_results, to_markdown
    from cactus_bench.report.speedup import DRIFT_NOTE, speedup_table
    from cactus_bench.store import ResultStore

    old = pd.read_csv(FIXTURE, dtype=str, keep_default_na=False)
    first, last = list(old.columns).index("waves"), list(old.columns).index("baseline_load_gap")
    new_columns = ["drift_threshold", *old.columns[first : last + 1]]
    old.drop(columns=new_columns).to_csv(tmp_path / "old.csv", index=False)  # before they existed
    assert ResultStore(tmp_path / "old.csv").read()["drift_marked"].isna().all()
    rows = load_results([tmp_path / "old.csv"])
    assert rows["drift_marked"].isna().all()
    assert DRIFT_NOTE not in to_markdown(speedup_table(aggregate(rows))[0])
    marked = rows.index[(rows.sampler == "sps") & (rows.task == "gsm8k")]
    rows.loc[marked, "drift_marked"] = True
    markdown = to_markdown(speedup_table(aggregate(rows))[0])
    assert DRIFT_NOTE in markdown
    sps = {line.split("|")[1].strip(): line for line in markdown.splitlines() if "| SpS |" in line}
    assert sps["GSM8K"].count("] (drift)") == 2 and "(drift)" not in sps["Demo"]  # both cells
    assert not any("(drift)" in line for line in markdown.splitlines() if "| TAS" in line)


def test_gpu_state_reads_nvidia_smi_and_leaves_out_this_process(tmp_path, monkeypatch):
    import os
    import sys

    from cactus_bench.store import machine_state as machine

    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        '  *clocks.sm*) echo "1980" ;;\n'
        f'  *compute-apps*) printf "{os.getpid()}, 5000\\n4242, 1200\\n777, 300\\n" ;;\n'
        "esac\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as where pynvml is not installed
    assert machine.gpu_state("cpu") is None
    assert machine.gpu_state("cuda:0") == {
        "sm_clock_mhz": 1980,
        "other_processes": 2,
        "other_mib": 1500.0,
    }
