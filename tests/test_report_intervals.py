"""Intervals and significance marks in the report, from the FABRICATED fixture
tests/fixtures/results_intervals.csv (see tests/intervals_fixture.py: nothing in it was measured),
plus the paired tests against known values. Older CSVs without the new columns: test_report.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from intervals_fixture import DEMO, GSM8K, fabricated_rows
from matplotlib.colors import to_hex

from cactus_bench.report import aggregate, blocks, load_results, table1, to_latex, to_markdown
from cactus_bench.report.plots import FIGURES
from cactus_bench.report.significance import (
    MCNEMAR,
    SIGN_FLIP,
    binomial_tail,
    holm,
    mcnemar_exact,
    paired_score_test,
    score_marks,
    sign_flip_test,
)
from cactus_bench.report.speedup import speedup_table
from cactus_bench.store.bootstrap import bootstrap_rng, percentile_interval, resample_counts

FIXTURE = Path(__file__).parent / "fixtures" / "results_intervals.csv"
OLD_FIXTURE = Path(__file__).parent / "fixtures" / "results_small.csv"


@pytest.fixture(scope="module")
def agg():
    return aggregate(load_results([FIXTURE]))


def cells_of(markdown: str, label: str) -> list[str]:
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r}")


# ---- the paired tests ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("only_first", "only_second", "p"),
    [
        (1, 9, 2 * 11 / 1024),  # 2 P(X <= 1), X ~ Bin(10, 1/2) = 2 (1 + 10) / 2^10
        (0, 5, 2 / 32),
        (2, 10, 2 * (1 + 12 + 66) / 4096),
        (3, 3, 1.0),  # capped at 1
        (0, 0, 1.0),  # no discordant prompt: no evidence either way
        (15, 0, 2 / 2**15),
    ],
)
def test_mcnemar_exact_matches_the_binomial_tail(only_first, only_second, p):
    both, neither = 7, 4  # concordant prompts do not enter the test
    first = [1] * only_first + [0] * only_second + [1] * both + [0] * neither
    second = [0] * only_first + [1] * only_second + [1] * both + [0] * neither
    assert mcnemar_exact(first, second) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(second, first) == pytest.approx(p, rel=1e-12)  # two-sided, symmetric
    assert sign_flip_test(first, second) == pytest.approx(p, rel=1e-12)  # the same test on 0/1
    assert paired_score_test(first, second) == (pytest.approx(p, rel=1e-12), MCNEMAR)


def test_mcnemar_agrees_with_scipy_binomtest():
    stats = pytest.importorskip("scipy.stats")
    for b, c in ((4, 17), (30, 45), (120, 90)):
        expected = stats.binomtest(b, b + c, 0.5).pvalue
        assert mcnemar_exact([1] * b + [0] * c, [0] * b + [1] * c) == pytest.approx(expected)
    assert binomial_tail(3, 10) == pytest.approx(stats.binom.cdf(3, 10, 0.5))


def test_sign_flip_test_on_fractional_scores():
    # three prompts each 0.5 better: of the 8 sign patterns only +++ and --- reach |sum| 1.5
    assert sign_flip_test([1, 1, 1, 0.2], [0.5, 0.5, 0.5, 0.2]) == pytest.approx(2 / 8)
    # [0.5, 0.5, -1]: |sum| 0 is reached by every pattern
    assert sign_flip_test([1, 1, 0], [0.5, 0.5, 1]) == pytest.approx(1.0)
    p, test = paired_score_test([1, 0.5, 0.5], [0.5, 0.5, 0])
    assert test == SIGN_FLIP and p == pytest.approx(2 / 4)
    # many prompts (random patterns): 22 of 30 better by 0.5, 8 worse; exactly the sign test,
    # 2 P(X <= 8) for X ~ Bin(30, 1/2); the Monte Carlo p is within 4 of its s.d. (0.0009)
    first = [1.0] * 22 + [0.0] * 8
    second = [0.5] * 30
    assert sign_flip_test(first, second) == pytest.approx(2 * binomial_tail(8, 30), abs=0.004)
    with pytest.raises(ValueError, match="one length"):
        sign_flip_test([1, 0], [1])
    with pytest.raises(ValueError, match="0/1 scores"):
        mcnemar_exact([0.5, 1], [1, 1])


def test_holm_steps_down():
    # sorted 0.005 <= 0.05/4, 0.01 <= 0.05/3, then 0.03 > 0.05/2: stop
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]
    # more than Bonferroni (0.05/4 = 0.0125 would keep only the first): 0.016 <= 0.05/3 and
    # 0.02 <= 0.05/2, then 0.9 > 0.05
    assert holm([0.012, 0.016, 0.02, 0.9]) == [True, True, True, False]
    # step-down stops at the first failure: 0.026 > 0.05/2, so 0.03 stays, though <= 0.05
    assert holm([0.001, 0.03, 0.026]) == [True, False, False]
    assert holm([]) == []


# ---- marks and intervals in the tables -----------------------------------------------------------
def test_marks_follow_the_hand_computed_p_values(agg):
    (_, _, rows) = next(iter(blocks(agg)))
    by_method = {}
    from cactus_bench.report.tables import method_label

    for _, row in rows.iterrows():
        by_method.setdefault(method_label(row), {})[row["task"]] = row
    marks, tests, n = score_marks(by_method)
    # GSM8K: SpS-V 1:1 -> 1; TAS-SpS 2:5 and TAS-V 2:5 -> 0.45; Cactus 0.5 vs both 0:3 -> 0.25;
    # Cactus 1 (two seeds, fractional) vs both: 13 prompts -1 and two -0.5 -> exact flips, tiny.
    # Demo: three comparisons. Holm over all 10: only Cactus δ = 1 is marked, on both tasks.
    assert n == 10 and tests == sorted([MCNEMAR, SIGN_FLIP])
    assert marks == {("Cactus (δ = 1)", "gsm8k"): "†‡", ("Cactus (δ = 1)", "demo"): "†‡"}
    assert mcnemar_exact(GSM8K[("tas", None, 1)][1], GSM8K[("sps", None, 1)][1]) == pytest.approx(
        2 * binomial_tail(2, 7)
    )


def test_table1_prints_intervals_marks_and_says_how(agg):
    markdown = to_markdown(table1(agg)[0])
    verifier, cactus = cells_of(markdown, "Verifier"), cells_of(markdown, "Cactus (δ = 1)")
    interval = r"(\d+\.\d) \[(\d+\.\d), (\d+\.\d)\]"
    assert re.fullmatch(interval, verifier[0]) and verifier[1:3] == ["—", "—"]
    assert re.fullmatch(interval + "†‡", cactus[0]) and re.fullmatch(interval + "†‡", cactus[3])
    assert re.fullmatch(r"\d\.\d\d \[\d\.\d\d, \d\.\d\d\]", cactus[1])
    # two seeds: the score interval comes from the seed-averaged per-prompt scores
    averaged = np.mean([GSM8K[("cactus", 1.0, s)][1] for s in (1, 2)], axis=0)
    counts = resample_counts(60, 2000, bootstrap_rng(0))
    low, high = percentile_interval(counts @ averaged / 60)
    assert cactus[0] == f"{100 * averaged.mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]†‡"
    assert "percentile bootstrap over prompts (2000 resamples" in markdown
    assert "McNemar's exact test" in markdown and "α = 0.05" in markdown
    assert "Holm-corrected over the 10 comparisons" in markdown
    latex = to_latex(table1(agg)[0])
    assert r"\textsuperscript{\dag}\textsuperscript{\ddag}" in latex
    assert re.search(r"\d+\.\d \[\d+\.\d, \d+\.\d\]\\textsuperscript", latex)


def test_aggregated_cells_average_the_bounds_of_other_statistics(agg):
    fresh = load_results([FIXTURE])
    seeds = fresh[(fresh["sampler"] == "cactus") & (fresh["delta"] == 1.0)]
    seeds = seeds[seeds["task"] == "gsm8k"]
    cell = agg[(agg["sampler"] == "cactus") & (agg["delta"] == 1.0) & (agg["task"] == "gsm8k")]
    assert len(seeds) == 2 and int(cell["n_runs"].iloc[0]) == 2
    assert float(cell["al_ci_low"].iloc[0]) == pytest.approx(seeds["al_ci_low"].mean())
    per_prompt = json.loads(cell["score_by_prompt"].iloc[0])
    assert per_prompt[29:33] == [1.0, 0.5, 0.5, 0.0]


def test_per_position_intervals_are_kept_for_one_run_and_left_out_for_several(agg):
    fresh = load_results([FIXTURE])
    one = agg[(agg["sampler"] == "sps") & (agg["task"] == "gsm8k")].iloc[0]
    source = fresh[(fresh["sampler"] == "sps") & (fresh["task"] == "gsm8k")].iloc[0]
    assert int(one["n_runs"]) == 1
    for name in ("accept_rate_by_pos_ci_low", "accept_rate_by_pos_ci_high"):
        assert one[name] == source[name] and len(json.loads(one[name])) == 4
    two = agg[(agg["sampler"] == "cactus") & (agg["delta"] == 1.0) & (agg["task"] == "gsm8k")]
    assert int(two["n_runs"].iloc[0]) == 2 and two["accept_rate_by_pos"].notna().all()
    assert two["accept_rate_by_pos_ci_low"].isna().all()  # seeds averaged: no interval shown


def test_speedup_table_prints_paired_intervals(agg):
    markdown = to_markdown(speedup_table(agg)[0])
    line = next(row for row in markdown.splitlines() if row.startswith("| GSM8K | SpS |"))
    assert re.search(
        r"\| \d\.\d\dx \[\d\.\d\d, \d\.\d\d\] \| \d\.\d\dx \[\d\.\d\d, \d\.\d\d\] \|", line
    )
    assert "resampled together" in markdown


def test_old_csvs_render_without_brackets_or_marks():
    old = aggregate(load_results([OLD_FIXTURE]))
    for table in (*table1(old), *speedup_table(old)):
        markdown = to_markdown(table)
        assert "[" not in markdown.split("\n1.")[0] and "†" not in markdown
        assert "Brackets" not in markdown and "Holm" not in markdown


def test_figures_draw_interval_bars_and_bands(agg):
    pair, m, rows = next(iter(blocks(agg)))
    figure = FIGURES["al_vs_delta"](rows, pair, m)
    ax = figure.axes[0]  # GSM8K
    assert "95% bootstrap interval" in ax.get_ylabel()
    assert ax.collections  # the error-bar segments
    assert len(ax.patches) >= 2  # SpS and TAS bands behind their reference lines
    score = FIGURES["score_vs_delta"](rows, pair, m).axes[0]
    assert "95% bootstrap interval" in score.get_ylabel() and "binomial" not in score.get_ylabel()
    tradeoff = FIGURES["score_vs_al"](rows, pair, m).axes[0]
    assert "95% bootstrap interval" in tradeoff.get_ylabel() and tradeoff.collections
    by_position = FIGURES["accept_by_position"](rows, pair, m)
    positions = by_position.axes[0]
    assert "95% bootstrap interval" in positions.get_ylabel()
    # one legend for both panels: a method keeps its color from panel to panel
    colors: dict[str, set] = {}
    for line in (line for ax in by_position.axes for line in ax.lines):
        name = line.get_label().split(",")[0]  # without a ", no bars" note
        colors.setdefault(name, set()).add(to_hex(line.get_color()))
    assert {"SpS", "Cactus (δ = 1)"} <= set(colors) and all(len(c) == 1 for c in colors.values())
    # one bar per position for each one-run method; Cactus δ = 1 averages 2 seeds: no bars
    one_run = rows[(rows["task"] == "gsm8k") & rows["accept_rate_by_pos_ci_low"].notna()]
    assert len(one_run) == 3  # SpS, TAS, Cactus δ = 0.5 (the verifier drafts nothing)
    bar_lines = [c for c in positions.collections if len(c.get_segments()) == m]
    assert len(bar_lines) == len(one_run)
    old_pair, old_m, old_rows = next(iter(blocks(aggregate(load_results([OLD_FIXTURE])))))
    old = FIGURES["al_vs_delta"](old_rows, old_pair, old_m).axes[0]
    assert "interval" not in old.get_ylabel() and not old.patches
    old_positions = FIGURES["accept_by_position"](old_rows, old_pair, old_m).axes[0]
    assert old_positions.lines and not old_positions.collections
    assert "interval" not in old_positions.get_ylabel()


def test_the_fixture_is_what_the_generator_writes(tmp_path):
    """The committed FABRICATED CSV matches tests/intervals_fixture.py (regenerate it there)."""
    from intervals_fixture import write_fixture

    assert len(fabricated_rows()) == len(GSM8K) + len(DEMO)
    fresh = load_results([write_fixture(tmp_path / "fixture.csv")]).drop(columns="source_file")
    committed = load_results([FIXTURE]).drop(columns="source_file")
    assert list(fresh.columns) == list(committed.columns)
    for name in fresh.columns:  # sums may differ in the last bit with another BLAS
        if str(fresh[name].dtype) == "Float64":
            assert np.allclose(
                fresh[name].astype(float), committed[name].astype(float), rtol=1e-12, equal_nan=True
            ), name
        else:
            assert fresh[name].equals(committed[name]), name


def test_rows_of_other_prompts_are_not_paired(agg):
    (_, _, rows) = next(iter(blocks(agg)))
    from cactus_bench.report.tables import method_label

    by_method = {}
    for _, row in rows.iterrows():
        row = row.copy()
        if row["sampler"] == "verifier":
            row["prompts_hash"] = "0000000000000000"  # as if decoded on other prompts
        by_method.setdefault(method_label(row), {})[row["task"]] = row
    marks, _, n = score_marks(by_method)
    assert n == 4  # vs SpS only: TAS, Cactus 0.5 and 1 on GSM8K, Cactus 1 on the demo
    assert marks == {("Cactus (δ = 1)", "gsm8k"): "†", ("Cactus (δ = 1)", "demo"): "†"}
