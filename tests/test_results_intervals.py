"""The paired percentile bootstrap of store/intervals.py: hand computations, coverage by
simulation, why pairing matters, and the row columns it writes (fixed seeds throughout)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from cactus_bench.store import COLUMNS, MEASUREMENT_COLUMNS, ResultStore, row_to_cells, summarise
from cactus_bench.store.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    bootstrap_rng,
    percentile_interval,
    ratio_of_sums,
    resample_counts,
)
from cactus_bench.store.intervals import (
    LATENCY_QUANTILES,
    POSITION_INTERVAL_COLUMNS,
    bootstrap_intervals,
    interval_column_names,
    latency_columns,
    per_prompt_columns,
    per_prompt_totals,
    time_per_output_token,
)
from cactus_bench.store.length import DIAGNOSTIC_COLUMNS, LENGTH_COLUMNS
from cactus_bench.store.summarise import machine_time


def record(accepted: list[int], seconds: float, m: int = 4, prompt: int = 0) -> dict:
    """A speculative record (m > 0) or, with m = 0, a verifier-only one (one token per step)."""
    return {
        "prompt_ids": [prompt, 7],
        "num_draft_tokens": m,
        "drafted_per_step": [m] * len(accepted),
        "accepted_per_step": accepted,
        "emitted_per_step": [a + 1 for a in accepted],
        "output_ids": list(range(sum(accepted) + len(accepted))),
        "draft_time_s": 0.0,
        "verify_time_s": seconds,
        "sampler_time_s": 0.0,
        "total_time_s": seconds,
    }


def test_bootstrap_matches_a_hand_computation():
    # Three prompts: accepted / steps = 4/2, 0/1, 6/3. Three resamples, written out by hand.
    spec = per_prompt_totals(
        [record([2, 2], 1.0), record([0], 1.0, prompt=1), record([2, 2, 2], 2.0, prompt=2)], 3
    )
    assert list(spec["accepted"]) == [4, 0, 6] and list(spec["steps"]) == [2, 1, 3]
    counts = np.array([[2, 1, 0], [0, 0, 3], [1, 1, 1]])  # prompts {0,0,1}, {2,2,2}, {0,1,2}
    al = ratio_of_sums(counts, spec["accepted"], spec["steps"])
    # ratio of sums, not mean of ratios: (4+4+0)/(2+2+1) = 8/5, not (2+2+0)/3
    assert al == pytest.approx([8 / 5, 18 / 9, 10 / 6])
    # percentiles by linear interpolation over the sorted values 1.6, 1.667, 2.0:
    # 2.5 %: position 0.05 -> 1.6 + 0.05 (1.667 - 1.6); 97.5 %: position 1.95
    low, high = percentile_interval(al)
    assert low == pytest.approx(1.6 + 0.05 * (10 / 6 - 1.6))
    assert high == pytest.approx(10 / 6 + 0.95 * (2.0 - 10 / 6))
    scores = np.array([1.0, 0.0, 1.0])
    out = bootstrap_intervals(counts, spec, None, scores, speculative=True)
    # score means per resample: 2/3, 1, 2/3 -> sorted 2/3, 2/3, 1
    assert out["score_ci_low"] == pytest.approx(2 / 3)
    assert out["score_ci_high"] == pytest.approx(2 / 3 + 0.95 * (1 / 3))
    assert out["speedup_tokens_ci_low"] is None  # no baseline, no speedup interval


def test_the_identity_resample_gives_the_rows_point_estimates():
    spec = [record([1, 3, 0], 0.9), record([4, 4], 0.4, prompt=1), record([2], 0.3, prompt=2)]
    base = [record([0] * 5, 1.2, m=0), record([0] * 10, 1.5, m=0), record([0] * 3, 0.6, m=0)]
    row = summarise(spec, base)
    ones = np.ones((1, 3))
    a, b = per_prompt_totals(spec, 3), per_prompt_totals(base, 3)
    assert ratio_of_sums(ones, a["accepted"], a["steps"])[0] == pytest.approx(row["al"])
    assert ratio_of_sums(ones, a["emitted"], a["steps"])[0] == pytest.approx(row["tokens_per_step"])
    assert ratio_of_sums(ones, b["time"], a["time"])[0] == pytest.approx(row["speedup_walltime"])
    rate = ratio_of_sums(ones, a["gen"], a["time"]) / ratio_of_sums(ones, b["gen"], b["time"])
    assert rate[0] == pytest.approx(row["speedup_tokens"])


def test_resample_counts_draw_n_prompts_with_replacement():
    counts = resample_counts(5, 4000, bootstrap_rng(1234))
    assert counts.shape == (4000, 5) and (counts.sum(axis=1) == 5).all()
    assert counts.mean(axis=0) == pytest.approx([1.0] * 5, abs=0.05)
    # a prompt is absent from a resample with probability (1 - 1/n)^n = 0.328
    assert (counts == 0).mean() == pytest.approx(0.8**5, abs=0.01)
    again = resample_counts(5, 4000, bootstrap_rng(1234))
    assert (again == counts).all()
    assert not (resample_counts(5, 4000, bootstrap_rng(1235)) == counts).all()


# Coverage: the percentile bootstrap undercovers at small n (about 92 % at n = 15), so the
# simulations use 100 prompts, where it is close to nominal, and 1000 data sets, so that the
# binomial noise of the observed rate (s.d. 0.7 points) stays well inside the 93-97 % band.
COVERAGE_PROMPTS, COVERAGE_SETS = 100, 1000


def coverage(values: np.ndarray, truth: float) -> float:
    """Share of columns (data sets) whose percentile interval of [B, sets] values holds truth."""
    hits = [low <= truth <= high for low, high in map(percentile_interval, values.T)]
    return float(np.mean(hits))


def test_95_percent_intervals_cover_a_known_mean_about_95_percent_of_the_time():
    # per-prompt scores ~ N(3, 2^2): the interval of the mean must hold 3 in 93-97 % of the sets
    rng = np.random.default_rng(2024)
    n = COVERAGE_PROMPTS
    counts = resample_counts(n, BOOTSTRAP_RESAMPLES, bootstrap_rng(0))  # [B, n]
    scores = rng.normal(3.0, 2.0, size=(n, COVERAGE_SETS))  # [n, sets]
    assert 0.93 <= coverage(counts @ scores / n, 3.0) <= 0.97


def test_ratio_intervals_cover_the_population_ratio():
    # AL-like ratio of sums: steps ~ 1 + Poisson(20), accepted ~ Binomial(4 steps, 0.3), so the
    # population ratio E[accepted] / E[steps] is 4 * 0.3 = 1.2 exactly.
    rng = np.random.default_rng(7)
    n = COVERAGE_PROMPTS
    counts = resample_counts(n, BOOTSTRAP_RESAMPLES, bootstrap_rng(0))
    steps = 1 + rng.poisson(20, size=(n, COVERAGE_SETS))  # [n, sets]
    accepted = rng.binomial(4 * steps, 0.3)
    assert 0.93 <= coverage(ratio_of_sums(counts, accepted, steps), 1.2) <= 0.97


def test_pairing_cancels_the_prompt_to_prompt_spread():
    # Prompt lengths vary 10x and a long answer is also slower per token (time ~ length^1.3),
    # so both arms' times and tokens/s vary a lot across prompts; the run is 1.25x faster on
    # every prompt, up to 3 % noise. Resampling both arms together keeps both speedup forms
    # near 1.25; resampling them independently mixes long and short prompts and widens them.
    rng = np.random.default_rng(3)
    lengths = rng.integers(10, 100, size=40)
    base_time = 0.01 * lengths**1.3
    spec_time = base_time / 1.25 * (1 + 0.03 * rng.standard_normal(40))
    spec = [record([0] * int(n), float(spec_time[i]), prompt=i) for i, n in enumerate(lengths)]
    base = [record([0] * int(n), float(base_time[i]), m=0) for i, n in enumerate(lengths)]
    row = per_prompt_columns(spec, base, None, seed=11)
    a, b = per_prompt_totals(spec, 40), per_prompt_totals(base, 40)
    spec_counts = resample_counts(40, 2000, bootstrap_rng(11))
    base_counts = resample_counts(40, 2000, bootstrap_rng(12))  # independent: unpaired
    unpaired = {
        "speedup_walltime": ratio_of_sums(base_counts, b["time"], np.ones(40))
        / ratio_of_sums(spec_counts, a["time"], np.ones(40)),
        "speedup_tokens": ratio_of_sums(spec_counts, a["gen"], a["time"])
        / ratio_of_sums(base_counts, b["gen"], b["time"]),
    }
    for stat, values in unpaired.items():
        low, high = percentile_interval(values)
        paired = row[f"{stat}_ci_high"] - row[f"{stat}_ci_low"]
        assert row[f"{stat}_ci_low"] <= 1.25 <= row[f"{stat}_ci_high"], stat
        assert paired < 0.1 and high - low > 3 * paired, (stat, paired, high - low)


def test_row_columns_of_a_speculative_run_with_repeats():
    # 2 prompts x 2 repeats: record i belongs to prompt i % 2
    spec = [
        record([1, 1], 1.0, prompt=0),
        record([3], 1.0, prompt=1),
        record([0, 2], 1.0, prompt=0),
        record([4], 0.5, prompt=1),
    ]
    base = [record([0] * 4, 2.0, m=0, prompt=p) for p in (0, 1, 0, 1)]
    totals = per_prompt_totals(spec, 2)
    assert list(totals["accepted"]) == [4, 7] and list(totals["steps"]) == [4, 2]
    row = per_prompt_columns(spec, base, [0.5, 1.0], seed=5)
    assert set(row) == {
        "score_by_prompt",
        "prompts_hash",
        "ci_resamples",
        *interval_column_names(),
        *POSITION_INTERVAL_COLUMNS,
        *LATENCY_QUANTILES,
        *LENGTH_COLUMNS,
        *DIAGNOSTIC_COLUMNS,
    }
    assert row["score_by_prompt"] == [0.5, 1] and row["ci_resamples"] == BOOTSTRAP_RESAMPLES
    for stat in ("score", "al", "tokens_per_step", "speedup_tokens", "speedup_walltime"):
        assert row[f"{stat}_ci_low"] <= row[f"{stat}_ci_high"], stat
    assert row == per_prompt_columns(spec, base, [0.5, 1.0], seed=5)  # reproducible
    with pytest.raises(ValueError, match="do not split into repeats"):
        per_prompt_totals(spec[:3], 2)
    # a finished run is not thrown away for it: empty intervals and a warning
    with pytest.warns(UserWarning, match=r"records \(3\) do not split into repeats of 2"):
        broken = per_prompt_columns(spec[:3], None, [0.5, 1.0], seed=5)
    assert broken["score_by_prompt"] == [0.5, 1] and broken["score_ci_low"] is None
    with pytest.warns(UserWarning, match="3 per-prompt scores for 2 prompts"):
        mismatched = per_prompt_columns(spec, base, [0.5, 1.0, 1.0], seed=5, n_prompts=2)
    assert mismatched["score_by_prompt"] is None and mismatched["score_ci_low"] is None
    assert mismatched["al_ci_low"] == row["al_ci_low"]  # the rest still has its intervals


def test_per_prompt_position_counts_follow_summarise():
    # prompt 0 drafts 3, 3, 2 (the last step near the token cap) and accepts 3, 1, 0;
    # prompt 1 drafts 3 and accepts 2, in two repeats
    first = {**record([3, 1, 0], 1.0, m=3), "drafted_per_step": [3, 3, 2]}
    spec = [first, record([2], 1.0, m=3, prompt=1), first, record([2], 1.0, m=3, prompt=1)]
    totals = per_prompt_totals(spec, 2)
    assert totals["drafted_by_pos"].tolist() == [[6, 6, 4], [2, 2, 2]]
    assert totals["accepted_by_pos"].tolist() == [[4, 2, 2], [2, 2, 0]]
    ones = np.ones((1, 2))  # the identity resample gives the row's point estimate
    rates = [
        ratio_of_sums(ones, totals["accepted_by_pos"][:, j], totals["drafted_by_pos"][:, j])[0]
        for j in range(3)
    ]
    assert rates == pytest.approx(summarise(spec)["accept_rate_by_pos"])


def test_position_intervals_cover_the_rates_and_share_the_resamples():
    rng = np.random.default_rng(4)
    spec = [  # 30 prompts, m = 3, 5-15 steps each accepting Binomial(3, 0.5) drafts
        record([int(a) for a in rng.binomial(3, 0.5, size=int(rng.integers(5, 16)))], 1.0, 3, i)
        for i in range(30)
    ]
    row = {**summarise(spec), **per_prompt_columns(spec, None, None, seed=9)}
    low, high = (row[c] for c in POSITION_INTERVAL_COLUMNS)
    assert len(low) == len(high) == 3
    for j, rate in enumerate(row["accept_rate_by_pos"]):
        assert low[j] < rate < high[j], j
        assert high[j] - low[j] < 0.3, j  # ~300 steps per position: a few points wide
    # m = 1 and every step drafts: position 1's rate IS the AL, and on the same resamples its
    # interval is the AL's, to the last bit
    single = [record([int(a) for a in rng.binomial(1, 0.6, size=8)], 1.0, 1, i) for i in range(20)]
    one = per_prompt_columns(single, None, None, seed=3)
    assert one["accept_rate_by_pos_ci_low"] == [one["al_ci_low"]]
    assert one["accept_rate_by_pos_ci_high"] == [one["al_ci_high"]]


def test_a_position_some_resamples_never_draft_has_no_interval():
    # only prompt 0 ever drafts position 2: resamples without it leave position 2 undefined
    spec = [{**record([2, 1], 1.0, m=2), "drafted_per_step": [2, 1]}] + [
        {**record([1, 0], 1.0, m=2, prompt=i), "drafted_per_step": [1, 1]} for i in range(1, 6)
    ]
    row = per_prompt_columns(spec, None, None, seed=0)
    assert row["accept_rate_by_pos_ci_low"][1] is None
    assert row["accept_rate_by_pos_ci_high"][1] is None
    assert row["accept_rate_by_pos_ci_low"][0] <= row["accept_rate_by_pos_ci_high"][0]
    assert row["al_ci_low"] is not None  # the scalar intervals are unaffected


def test_one_prompt_or_no_drafts_leave_interval_cells_empty():
    one = per_prompt_columns([record([1], 1.0)], [record([0], 1.0, m=0)], [1.0], seed=0)
    assert all(one[c] is None for c in interval_column_names()) and one["ci_resamples"] is None
    assert all(one[c] is None for c in POSITION_INTERVAL_COLUMNS)  # < 2 prompts: no list at all
    assert one["score_by_prompt"] == [1] and one["prompts_hash"]
    verifier = per_prompt_columns(
        [record([0, 0], 1.0, m=0), record([0], 1.0, m=0, prompt=1)], None, [1.0, 0.0], seed=0
    )
    assert verifier["score_ci_low"] == 0.0 and verifier["score_ci_high"] == 1.0
    assert all(
        verifier[f"{s}_ci_low"] is None for s in ("al", "speedup_tokens", "speedup_walltime")
    )
    assert all(verifier[c] is None for c in POSITION_INTERVAL_COLUMNS)  # no drafts, no positions


def test_schema_holds_the_new_columns_and_error_rows_leave_them_empty():
    for name in (
        *interval_column_names(),
        *POSITION_INTERVAL_COLUMNS,
        "score_by_prompt",
        "prompts_hash",
        "ci_resamples",
    ):
        assert name in COLUMNS and name in MEASUREMENT_COLUMNS, name
    assert "repeats" in COLUMNS and "repeats" not in MEASUREMENT_COLUMNS
    base = {"run_id": "r", "config_hash": "h", "task": "demo", "sampler": "sps", "status": "ok"}
    with pytest.raises(ValueError, match="al_ci_low = 2.0 is above its upper end 1.0"):
        row_to_cells({**base, "al_ci_low": 2.0, "al_ci_high": 1.0})
    with pytest.raises(ValueError, match="stale"):
        row_to_cells({**base, "status": "error", "error": "E: x", "score_ci_low": 0.1})
    cells = dict(zip(COLUMNS, row_to_cells({**base, "score_by_prompt": [1, 0, 0.5]}), strict=True))
    assert cells["score_by_prompt"] == "[1,0,0.5]"  # compact JSON
    # per-position lists are checked end by end; an undefined position (None) is skipped
    low, high = POSITION_INTERVAL_COLUMNS
    lists = {**base, low: [0.5, None], high: [0.7, 0.2]}
    cells = dict(zip(COLUMNS, row_to_cells(lists), strict=True))
    assert cells[low] == "[0.5,null]" and cells[high] == "[0.7,0.2]"
    with pytest.raises(ValueError, match=r"accept_rate_by_pos_ci_low = \[0.5, 0.4\] is above"):
        row_to_cells({**base, low: [0.5, 0.4], high: [0.7, 0.2]})
    with pytest.raises(ValueError, match="has 1 entries but its upper end 2"):
        row_to_cells({**base, low: [0.5], high: [0.7, 0.2]})


def test_a_batched_request_counts_its_share_of_the_machine():
    """At batch > 1 a request's throughput time is its share of the run (share_time_s), not its
    wall time, which includes its neighbours' work; at batch 1 it is its own time."""
    alone = {"batch_size": 1, "total_time_s": 2.0, "share_time_s": 0.0}
    batched = {"batch_size": 4, "total_time_s": 2.0, "share_time_s": 0.5}
    assert machine_time(alone) == 2.0 and machine_time(batched) == 0.5
    assert machine_time({"total_time_s": 3.0}) == 3.0  # a record from before batching
    spec = [record([1], 1.0, prompt=p) for p in (0, 1)]
    for one in spec:
        one.update(batch_size=2, share_time_s=0.25)  # 1 s of wall time each, shared by two
    row = summarise(spec)
    assert row["wall_time_spec_s"] == 0.5
    assert row["tokens_per_s_spec"] == row["generated_tokens"] / 0.5


def test_latency_quantiles_match_a_brute_force_resample():
    """tpot_* are quantiles of each request's time per output token; each resample's weighted
    quantile equals the quantile of the resampled requests laid out one by one."""
    rng = np.random.default_rng(3)
    n_prompts, repeats = 7, 2
    records = []
    for _ in range(n_prompts * repeats):
        tokens = int(rng.integers(1, 9))
        records.append({"total_time_s": float(rng.uniform(0.5, 3.0)), "output_ids": [0] * tokens})
    tpot = time_per_output_token(records)
    counts = resample_counts(n_prompts, 50, bootstrap_rng(1))
    columns = latency_columns(records, n_prompts, counts)
    for name, quantile in LATENCY_QUANTILES.items():
        assert columns[name] == np.quantile(tpot, quantile, method="inverted_cdf")
        by_hand = []
        for drawn in counts:  # [n_prompts] how often each prompt was drawn
            values = [
                tpot[i] for i in range(len(records)) for _ in range(int(drawn[i % n_prompts]))
            ]
            by_hand.append(np.quantile(values, quantile, method="inverted_cdf"))
        assert (columns[f"{name}_ci_low"], columns[f"{name}_ci_high"]) == percentile_interval(
            np.array(by_hand)
        )
    assert columns["tpot_median_s_ci_low"] <= columns["tpot_median_s"]
    assert columns["tpot_p90_s"] >= columns["tpot_median_s"]


def test_an_old_csv_is_widened_and_its_rows_read_with_empty_intervals(tmp_path):
    new = {*interval_column_names(), *POSITION_INTERVAL_COLUMNS, "score_by_prompt", "repeats"}
    new |= {"prompts_hash", "ci_resamples"}
    old_columns = [c for c in COLUMNS if c not in new]
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(old_columns)
        writer.writerow(["old" if c in ("run_id", "config_hash") else "" for c in old_columns])
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    rows[1][old_columns.index("task")], rows[1][old_columns.index("sampler")] = "demo", "sps"
    rows[1][old_columns.index("status")] = "ok"
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    store = ResultStore(path)
    store.append(
        {
            "run_id": "new",
            "config_hash": "h2",
            "task": "demo",
            "sampler": "sps",
            "status": "ok",
            "repeats": 2,
            **per_prompt_columns(
                [record([1], 1.0), record([2], 1.0, prompt=1)], None, [1.0, 0.5], seed=0
            ),
        }
    )
    header = next(csv.reader(open(path, newline="")))
    assert header[: len(old_columns)] == old_columns and set(header) == set(COLUMNS)
    frame = store.read()
    old, fresh = frame.iloc[0], frame.iloc[1]
    assert old["score_ci_low"] is np.nan or old.isna()["score_ci_low"]
    assert old.isna()["score_by_prompt"] and old.isna()["repeats"]
    assert fresh["score_by_prompt"] == "[1,0.5]" and fresh["repeats"] == 2
    assert fresh["ci_resamples"] == BOOTSTRAP_RESAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("n", [15, 100])
def test_scipy_bca_bootstrap_is_not_closer_to_95_percent(n):
    """Why the project keeps its percentile bootstrap: scipy's BCa bootstrap (paired for the
    ratio) covers no closer to 95% in the two coverage simulations above, at 15 prompts (both
    undercover) and at 100. If a scipy release changes that, this fails: switch then."""
    stats = pytest.importorskip("scipy.stats")
    sets = 2000
    counts = resample_counts(n, BOOTSTRAP_RESAMPLES, bootstrap_rng(0))

    def bca(data, statistic, truth):
        result = stats.bootstrap(
            data,
            statistic,
            n_resamples=BOOTSTRAP_RESAMPLES,
            paired=len(data) > 1,
            vectorized=True,
            axis=0,
            method="BCa",
            random_state=np.random.default_rng(0),
            batch=100,
        )
        low, high = result.confidence_interval
        return float(np.mean((low <= truth) & (truth <= high)))

    rng = np.random.default_rng(2024)
    scores = rng.normal(3.0, 2.0, size=(n, sets))  # [n, sets]
    mean = (coverage(counts @ scores / n, 3.0), bca((scores,), np.mean, 3.0))
    steps = 1 + np.random.default_rng(7).poisson(20, size=(n, sets))
    accepted = np.random.default_rng(8).binomial(4 * steps, 0.3).astype(float)
    ratio = (
        coverage(ratio_of_sums(counts, accepted, steps), 1.2),
        bca((accepted, steps.astype(float)), lambda a, s, axis: a.sum(axis) / s.sum(axis), 1.2),
    )
    for percentile, bca_coverage in (mean, ratio):
        assert abs(bca_coverage - 0.95) >= abs(percentile - 0.95) - 0.01, (mean, ratio)
        assert (0.89 if n == 15 else 0.93) <= percentile <= 0.97, (mean, ratio)
    print(f"n = {n}: coverage (percentile, BCa) mean {mean}, ratio {ratio}")
