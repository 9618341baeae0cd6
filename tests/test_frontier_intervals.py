"""Figures draw a percentile interval that excludes its estimate: clipped there and marked.

`make frontier` died with "'yerr' must not contain negative values" on the labelled GSM8K-train
set, whose paired matched-divergence interval lay wholly beside its difference. Each errorbar
site of frontier/ and report/ gets such an interval here, from the committed CSVs with one
interval moved past its estimate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection

from cactus_bench.frontier.plots import make_figures
from cactus_bench.report.error_bars import EXCLUDED_NOTE, clipped_errors

REPO = Path(__file__).resolve().parents[1]
FRONTIER_CSV = REPO / "results" / "frontier" / "smollm2_135m__drafter_train.csv"


def test_clipped_errors_never_go_negative_and_flag_the_excluded():
    value = np.array([0.5, 0.5, 0.5, 0.5])
    low = np.array([0.4, 0.55, 0.2, np.nan])  # inside, above the estimate, below, none
    high = np.array([0.6, 0.7, 0.45, np.nan])
    errors, excluded = clipped_errors(value, low, high)
    np.testing.assert_allclose(errors[:, :3], [[0.1, 0.0, 0.3], [0.1, 0.2, 0.0]])
    assert excluded.tolist() == [False, True, True, False]
    assert np.isnan(errors[:, 3]).all()


def _marks(figure) -> list[PathCollection]:
    return [
        artist
        for ax in figure.axes
        for artist in ax.collections
        if isinstance(artist, PathCollection) and artist.get_facecolor().size == 0
    ]


def _legend_texts(figure) -> list[str]:
    legends = list(figure.legends) + [ax.get_legend() for ax in figure.axes if ax.get_legend()]
    return [text.get_text() for legend in legends for text in legend.get_texts()]


def _every_interval_holds_its_estimate(frame: pd.DataFrame) -> pd.DataFrame:
    """The committed CSV with each interval widened to its estimate (the real set has
    percentile intervals beside their estimates, which these tests place one at a time)."""
    has = frame.ci_low.notna()
    frame.loc[has, "ci_low"] = frame.loc[has, ["ci_low", "value"]].min(axis=1)
    frame.loc[has, "ci_high"] = frame.loc[has, ["ci_high", "value"]].max(axis=1)
    return frame


@pytest.mark.parametrize("kind", ["matched", "entropy"])
def test_frontier_figures_draw_an_interval_beside_its_estimate(tmp_path, kind):
    frame = pd.read_csv(FRONTIER_CSV, keep_default_na=False, na_values=[""])
    frame = _every_interval_holds_its_estimate(frame)
    prefix = "matched_" if kind == "matched" else "gain@H="
    rows = frame.index[frame.statistic.str.startswith(prefix) & frame.ci_low.notna()]
    if kind == "entropy":  # only the headline arms are drawn there
        rows = [i for i in rows if (frame.rule[i], frame.parameter[i]) == ("cactus", "delta=1")]
    target = rows[0]
    spread = abs(frame.at[target, "value"]) + 0.05
    # the interval moves wholly above its estimate, as a percentile interval may lie
    frame.at[target, "ci_low"] = frame.at[target, "value"] + spread
    frame.at[target, "ci_high"] = frame.at[target, "value"] + 2 * spread
    csv = tmp_path / FRONTIER_CSV.name
    frame.to_csv(csv, index=False)

    from cactus_bench.frontier import plots

    figure = plots.FIGURES[kind](
        pd.read_csv(csv, keep_default_na=False, na_values=[""]).assign(
            parameter=lambda f: f.parameter.fillna("").astype(str)
        )
    )
    marks = _marks(figure)
    assert len(marks) == 1 and len(marks[0].get_offsets()) == 1
    assert EXCLUDED_NOTE in _legend_texts(figure)
    assert make_figures(csv, tmp_path / "figures", formats=("png",))  # the whole set renders


def test_frontier_figures_without_such_an_interval_get_no_mark():
    frame = pd.read_csv(FRONTIER_CSV, keep_default_na=False, na_values=[""])
    frame = _every_interval_holds_its_estimate(frame)
    frame["parameter"] = frame.parameter.fillna("").astype(str)
    from cactus_bench.frontier import plots

    for kind in ("matched", "entropy"):
        figure = plots.FIGURES[kind](frame)
        assert not _marks(figure) and EXCLUDED_NOTE not in _legend_texts(figure)


def test_the_rules_board_draws_an_interval_beside_its_estimate(tmp_path, monkeypatch):
    from cactus_bench.report import figure_parts, leaderboard
    from cactus_bench.report.leaderboard import write_leaderboard

    drawn = []
    save = figure_parts.save_figure
    monkeypatch.setattr(
        leaderboard, "save_figure", lambda figure, *a: drawn.append(figure) or save(figure, *a)
    )

    rows = pd.read_csv(REPO / "results" / "rules" / "rules.csv")
    ok = rows.index[(rows.status == "ok") & rows.al_ci_low.notna()]
    target = ok[0]
    rows.at[target, "al_ci_high"] = rows.at[target, "al"] - 0.05  # wholly below the AL
    rows.at[target, "al_ci_low"] = rows.at[target, "al"] - 0.1
    csv = tmp_path / "rules.csv"
    rows.to_csv(csv, index=False)
    paths = write_leaderboard(csv, tmp_path, REPO / "results" / "frontier" / "smollm2_135m.csv")
    assert [p.suffix for p in paths] == [".png", ".pdf"] * len(drawn)  # a figure per task
    figure = drawn[[p.stem for p in paths[::2]].index(f"leaderboard_{rows.at[target, 'task']}")]
    marks = _marks(figure)
    assert len(marks) == 1 and len(marks[0].get_offsets()) == 1
    assert EXCLUDED_NOTE in _legend_texts(figure)
    assert all(not _marks(other) for other in drawn if other is not figure)


def _intervals_beside(rows: pd.DataFrame) -> pd.DataFrame:
    """Every interval of `rows` moved wholly above its estimate (per-position ones too)."""
    import json

    rows = rows.copy()
    for low in [c for c in rows.columns if c.endswith("_ci_low")]:
        column, high = low.removesuffix("_ci_low"), low.replace("_ci_low", "_ci_high")
        if column == "accept_rate_by_pos":
            rates = [None if pd.isna(cell) else json.loads(cell) for cell in rows[column]]
            for end, shift in ((low, 0.01), (high, 0.02)):
                rows[end] = [
                    None if r is None else json.dumps([None if x is None else x + shift for x in r])
                    for r in rates
                ]
            continue
        value = pd.to_numeric(rows[column], errors="coerce")
        rows[low], rows[high] = value + 0.01 * value.abs() + 1e-3, value + 0.02 * value.abs() + 2e-3
    return rows


def test_the_run_figures_draw_intervals_beside_their_estimates():
    """report/: the δ sweeps, score against AL and the per-position rates (bars through
    `clipped_errors`) mark every such point, and say why once in the figure's legend."""
    from cactus_bench.report import aggregate, load_results
    from cactus_bench.report.plots import FIGURES
    from cactus_bench.report.tables import blocks

    fixture = Path(__file__).parent / "fixtures" / "results_small.csv"
    agg = _intervals_beside(aggregate(load_results([str(fixture)])))
    pair, m, rows = [b for b in blocks(agg) if b[0] == "qwen3_14b"][0]
    marked = 0
    for kind, build in FIGURES.items():
        figure = build(rows, pair, m)
        if _marks(figure):
            marked += 1
            assert EXCLUDED_NOTE in _legend_texts(figure), kind
            assert _legend_texts(figure).count(EXCLUDED_NOTE) == 1, kind
    assert marked >= 3, marked  # the δ sweeps, score vs AL, per position


def test_the_frontier_figure_leaves_zero_divergences_off_its_log_axes():
    """FSD unsmoothed never accepts, so its law is q and its mean KL is 1e-18 (rounding): drawn,
    it would stretch every log axis down to 1e-18 and squeeze the other rules into one corner."""
    held_out = FRONTIER_CSV.with_name("smollm2_135m.csv")
    frame = pd.read_csv(held_out, keep_default_na=False, na_values=[""])
    frame["parameter"] = frame.parameter.fillna("").astype(str)
    unsmoothed = frame[(frame.rule == "fsd_unsmoothed") & (frame.statistic == "kl")]
    assert not unsmoothed.empty and (unsmoothed.value < 1e-12).all()  # the case is there
    from cactus_bench.frontier import plots

    figure = plots.FIGURES["frontier"](frame)
    log_axes = [ax for ax in figure.axes if ax.get_xscale() == "log"]
    assert len(log_axes) == 4
    assert all(ax.get_xlim()[0] > 1e-6 for ax in log_axes)
