"""The rules leaderboard: the paired score difference against SpS, the board's power (MDE), the
floor rule that sends a task to a table, the arms' labels and the figure of the committed board."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cactus_bench.report import leaderboard
from cactus_bench.report.batch import rule_label
from cactus_bench.report.leaderboard import arm_label, write_leaderboard
from cactus_bench.report.leaderboard_power import (
    at_floor,
    minimum_detectable_difference,
    paired_difference,
    pairs_needed,
    pooled_sd,
)
from cactus_bench.store.bootstrap import percentile_interval, resample_counts

REPO = Path(__file__).resolve().parents[1]
RULES_CSV = REPO / "results" / "rules" / "rules.csv"
FRONTIER_CSV = REPO / "results" / "frontier" / "smollm2_135m.csv"


def test_paired_difference_by_hand():
    # two prompts, the arm right on the first only: each resample's mean difference is 0, 1/2
    # or 1 with probabilities 1/4, 1/2, 1/4, so about 500 of the 2,000 resamples sit at each end
    # and the 2.5th and 97.5th percentiles are 0 and 1
    assert paired_difference([1, 0], [0, 0]) == (0.5, 0.0, 1.0)
    # three prompts: one gained, none lost
    estimate, low, high = paired_difference([1, 1, 0], [0, 1, 0])
    assert estimate == pytest.approx(1 / 3) and low == 0.0 and high == 1.0


def test_paired_difference_cancels_what_both_arms_share():
    """Scores that swing from prompt to prompt, the arm one step above SpS on every prompt: the
    paired interval is the shift alone; resampled apart, the arms' spread would widen it."""
    reference = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    assert paired_difference(reference + 0.5, reference) == (0.5, 0.5, 0.5)
    assert paired_difference(reference, reference) == (0.0, 0.0, 0.0)


def test_paired_difference_is_the_projects_bootstrap_with_default_rng_0():
    rng = np.random.default_rng(7)
    arm, reference = rng.integers(0, 2, 15), rng.integers(0, 2, 15)
    counts = resample_counts(15, 2000, np.random.default_rng(0))
    low, high = percentile_interval(counts @ (arm - reference) / 15)
    assert paired_difference(arm, reference) == (float(np.mean(arm - reference)), low, high)
    assert paired_difference([1], [0]) == (1.0, None, None)  # one prompt: no interval
    with pytest.raises(ValueError, match="same prompts"):
        paired_difference([1, 0, 1], [1, 0])


def test_minimum_detectable_difference_by_hand():
    # z_0.975 = 1.959964, z_0.8 = 0.841621: (1.959964 + 0.841621) * 0.5 / sqrt(25) = 0.2801585
    assert minimum_detectable_difference(0.5, 25) == pytest.approx(0.2801585, abs=1e-6)
    # and back: (2.801585 * 0.5 / 0.1) ** 2 = 196.22 -> 197 prompts for a 10-point difference
    assert pairs_needed(0.10, 0.5) == 197
    assert pairs_needed(-0.10, 0.5) == 197  # a drop as a rise
    assert minimum_detectable_difference(0.5, pairs_needed(0.10, 0.5)) <= 0.10
    # [1, 0, 1, 0] has sample variance 1/3, [0, 0, 0, 0] has 0: pooled sd = sqrt(1/6)
    assert pooled_sd([np.array([1, 0, 1, 0]), np.zeros(4)]) == pytest.approx(math.sqrt(1 / 6))


def _part(*sps: tuple[float, float | None]) -> pd.DataFrame:
    rows = [{"rule": "cactus", "score": 0.6, "score_ci_high": 0.9}]
    rows += [{"rule": "sps", "score": score, "score_ci_high": high} for score, high in sps]
    return pd.DataFrame(rows)


def test_the_floor_is_sps_upper_interval_end_below_a_tenth():
    assert at_floor(_part((0.0, 0.0)))
    assert not at_floor(_part((0.53, 0.8)))
    assert not at_floor(_part((0.05, 0.2)))  # the interval reaches above the floor
    assert at_floor(_part((0.05, math.nan)))  # no interval: the score itself
    assert not at_floor(_part())  # no SpS row: never a floor


def test_arm_labels_read_like_docs_rules():
    assert arm_label("sps", "{}") == "sps"
    assert arm_label("cactus", '{"delta": 1.0}') == "cactus δ=1"
    assert arm_label("tas", '{"alpha": 0.3, "threshold": 0.09}') == "tas ε=0.09"
    assert arm_label("tas", '{"alpha": 0.5, "threshold": 0.09}') == "tas α=0.5 ε=0.09"
    assert arm_label("ensemble", '{"alpha": 0.3}') == "ensemble w=0.7"
    assert arm_label("fsd", '{"div": "js", "test_law": "unscaled", "threshold": 0.4}') == (
        "fsd T=0.4"
    )
    assert arm_label("bild", '{"tau": 5.0, "test_law": "unscaled"}') == "bild τ=5"
    assert arm_label("lenience", '{"l": 0.1}') == "lenience l=0.1"
    # the batch sweep's labels keep their form
    assert rule_label("tas", '{"alpha": 0.3, "threshold": 0.09}') == "tas alpha=0.3 threshold=0.09"


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """The committed board rebuilt into a folder: (out folder, the figures drawn, paths)."""
    out = tmp_path_factory.mktemp("board")
    drawn = []
    save = leaderboard.save_figure
    patch = pytest.MonkeyPatch()
    patch.setattr(
        leaderboard, "save_figure", lambda figure, *a: drawn.append(figure) or save(figure, *a)
    )
    try:
        paths = write_leaderboard(RULES_CSV, out, FRONTIER_CSV)
    finally:
        patch.undo()
    return out, drawn, paths


def test_the_board_pairs_every_arm_with_sps_and_pools_its_power(board):
    out, _, _ = board
    table = pd.read_csv(out / "leaderboard.csv")
    runs = pd.read_csv(RULES_CSV)
    for task in ("demo", "gsm8k"):
        part = runs[runs.task == task]
        sps = np.asarray(json.loads(part[part.sampler == "sps"].score_by_prompt.iloc[0]))
        differences = [
            np.asarray(json.loads(cell)) - sps
            for cell in part[part.sampler != "sps"].score_by_prompt
        ]
        sd = math.sqrt(np.mean([np.var(d, ddof=1) for d in differences]))
        expected = (1.959964 + 0.841621) * sd / math.sqrt(len(sps))
        rows = table[table.task == task]
        assert rows.score_mde.to_numpy() == pytest.approx(expected, rel=1e-3)  # %.4g in the CSV
        own = rows[rows.rule == "sps"].iloc[0]
        assert (own.score_diff_sps, own.score_diff_sps_ci_low, own.score_diff_sps_ci_high) == (
            0,
            0,
            0,
        )
        assert rows.score_diff_sps.to_numpy() == pytest.approx(
            rows.score.to_numpy() - own.score, abs=1e-3
        )
        assert (rows.score_diff_sps_ci_low <= rows.score_diff_sps + 1e-9).all()
    assert table[table.task == "demo"].score_mde.iloc[0] == pytest.approx(0.2495, abs=1e-3)


def test_the_floor_task_is_a_table_and_the_other_a_figure(board):
    out, _, paths = board
    names = ["leaderboard_demo.png", "leaderboard_demo.pdf"]
    names += ["leaderboard_ifeval.png", "leaderboard_ifeval.pdf"]
    assert [p.name for p in paths] == names
    assert sorted(p.name for p in (out / "figures").iterdir()) == sorted(names)
    text = (out / "leaderboard.md").read_text()
    demo, gsm8k = text.split("\n## demo")[1], text.split("\n## gsm8k")[1]
    assert "](figures/leaderboard_demo.png)" in demo.split("## gsm8k")[0]
    assert gsm8k.startswith(": 15 prompts, m = 2, at the floor")
    assert "figures/leaderboard_gsm8k" not in text
    assert "| cactus δ=2 | 1.35 [1.23, 1.46] | 0.13 [0.00, 0.33] | +0.13 [+0.00, +0.33] |" in gsm8k
    assert "0.25 (25 points)" in demo and "would need 94 prompts" in demo
    assert "`score_mde`" in (out / "leaderboard.definitions.md").read_text()


def test_the_figure_shares_its_rows_and_names_pair_prompts_and_machine(board):
    _, drawn, _ = board
    figure, _ = drawn  # demo, then ifeval (gsm8k is at the floor: a table)
    al_ax, diff_ax = figure.axes
    table = pd.read_csv(board[0] / "leaderboard.csv")
    demo = table[table.task == "demo"]
    labels = [tick.get_text() for tick in al_ax.get_yticklabels()]
    assert labels == list(demo.label) and labels[0] == "sps" and "tas ε=0.09" in labels
    assert al_ax.get_shared_y_axes().joined(al_ax, diff_ax)
    assert any(list(line.get_xdata()) == [0.0, 0.0] for line in diff_ax.get_lines())
    title = figure._suptitle.get_text()
    assert "smollm2_135m" in title and "15 prompts" in title
    assert "(2 cores, 1 torch thread)" in title  # the CSV's "1 torch threads", normalised


def test_rows_scored_on_other_prompts_are_refused(tmp_path):
    rows = pd.read_csv(RULES_CSV)
    rows.loc[rows.index[(rows.task == "demo")][3], "prompts_hash"] = "0123456789abcdef"
    csv = tmp_path / "rules.csv"
    rows.to_csv(csv, index=False)
    with pytest.raises(ValueError, match=r"task demo's rows scored different prompts") as error:
        write_leaderboard(csv, tmp_path, FRONTIER_CSV)
    assert "\n" not in str(error.value)
