"""The length columns and per-request diagnostics of a results row (store/length.py), their
rebuild from a per-prompt table (store/length_rebuild.py), and the committed paper-claims rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cactus_bench.store.bootstrap import bootstrap_rng, resample_counts
from cactus_bench.store.columns import COLUMNS
from cactus_bench.store.length import (
    LENGTH_COLUMNS,
    diagnostic_columns,
    length_columns,
    length_columns_from_arrays,
)
from cactus_bench.store.length_rebuild import fill_length_columns

REPO = Path(__file__).resolve().parents[1]


def answer(tokens: int, capped: bool, **extra) -> dict:
    return {
        "output_ids": list(range(tokens)),
        "stop_reason": "length" if capped else "eos",
        **extra,
    }


def test_lambda_and_the_cap_out_share_pair_each_prompt_with_its_baseline():
    # 4 prompts x 2 repeats (record i is prompt i % 4): the rule's answers are longer
    spec = [answer(t, t == 100) for t in (100, 40, 60, 100)] * 2
    base = [answer(t, t == 100) for t in (50, 40, 60, 100)] * 2
    counts = resample_counts(4, 2000, bootstrap_rng(3))
    row = length_columns(spec, base, 4, counts)
    assert row["length_ratio"] == pytest.approx(300 / 250)
    assert row["mean_answer_tokens"] == 75 and row["baseline_mean_answer_tokens"] == 62.5
    assert (row["cap_out_share"], row["baseline_cap_out_share"]) == (0.5, 0.25)
    assert row["cap_out_diff"] == pytest.approx(0.25)
    assert row["length_ratio_ci_low"] <= row["length_ratio"] <= row["length_ratio_ci_high"]
    # paired: only prompt 0 differs, so no resample can make the rule's answers shorter
    assert row["length_ratio_ci_low"] >= 1.0 and row["cap_out_diff_ci_low"] >= 0.0
    no_base = length_columns(spec, None, 4, counts)
    assert no_base["length_ratio"] is None and no_base["cap_out_share"] == 0.5
    assert set(row) == set(LENGTH_COLUMNS)


def test_diagnostics_are_empty_where_the_records_lack_them_never_zero():
    counted = [
        answer(
            100,
            False,
            drafted_per_step=[2] * 50,
            accepted_per_step=[1] * 50,
            out_of_head_per_step=[0] * 45 + [1] * 5,
            repeat_share=0.2,
            ends_in_loop=False,
        ),
        answer(
            100,
            True,
            drafted_per_step=[2] * 50,
            accepted_per_step=[2] * 50,
            out_of_head_per_step=[1] * 50,
            repeat_share=0.6,
            ends_in_loop=True,
        ),
    ]
    row = diagnostic_columns(counted)
    assert row["out_of_head_per_1k"] == pytest.approx(1000 * 55 / 200)
    assert (row["request_accept_rate_p10"], row["request_accept_rate_p90"]) == (0.5, 1.0)
    assert row["repeat_share"] == pytest.approx(0.4) and row["loop_share"] == 0.5
    older = [answer(10, False, drafted_per_step=[2], accepted_per_step=[1])]
    empty = diagnostic_columns(older)
    assert empty["out_of_head_per_1k"] is None and empty["loop_share"] is None
    assert empty["repeat_share"] is None and empty["request_accept_rate_p10"] == 0.5


def test_the_rebuild_fills_covered_rows_and_leaves_the_others_empty(tmp_path):
    csv = tmp_path / "claims.csv"
    base = {"status": "ok", "n_prompts": 3, "prompts_hash": "h", "seed": 1, "ci_resamples": 500}
    rows = [
        {**base, "run_id": "v", "config_hash": "a", "task": "t", "sampler": "verifier"},
        {**base, "run_id": "s", "config_hash": "b", "task": "t", "sampler": "sps"},
        {**base, "run_id": "x", "config_hash": "c", "task": "t", "sampler": "tas"},
    ]
    pd.DataFrame(rows).to_csv(csv, index=False)
    table = pd.DataFrame(
        [
            {"run_id": run, "prompt": i, "stop_reason": stop, "generated_tokens": tokens}
            for run, answers in (
                ("v", [(10, "eos"), (20, "eos"), (30, "length")]),
                ("s", [(20, "eos"), (20, "length"), (30, "length")]),
            )
            for i, (tokens, stop) in enumerate(answers)
        ]
    )
    assert fill_length_columns(csv, table) == 2
    filled = pd.read_csv(csv).set_index("run_id")
    assert set(COLUMNS) <= {*filled.columns, "run_id"}  # widened to every current column
    assert np.isnan(filled.loc["v", "length_ratio"]) and filled.loc["v", "cap_out_share"] == 1 / 3
    assert filled.loc["s", "length_ratio"] == pytest.approx(70 / 60)
    assert filled.loc["s", "cap_out_diff"] == pytest.approx(1 / 3)
    spec = {
        "gen": np.array([20.0, 20, 30]),
        "capped": np.array([0.0, 1, 1]),
        "requests": np.ones(3),
    }
    verifier = {
        "gen": np.array([10.0, 20, 30]),
        "capped": np.array([0.0, 0, 1]),
        "requests": np.ones(3),
    }
    same = length_columns_from_arrays(spec, verifier, resample_counts(3, 500, bootstrap_rng(1)))
    assert filled.loc["s", "length_ratio_ci_low"] == pytest.approx(same["length_ratio_ci_low"])
    assert filled.loc["x"][list(LENGTH_COLUMNS)].isna().all()  # no per-prompt lines: empty


def test_the_committed_claims_rows_carry_lambda_consistent_with_their_own_totals():
    """Rebuilt from the per-prompt table, λ must equal the run's own generated_tokens over
    baseline_generated_tokens, and speedup_walltime = speedup_tokens / λ."""
    rows = pd.read_csv(REPO / "results/paper_claims/paper_claims.csv")
    rules = rows[rows.sampler != "verifier"]
    assert len(rules) == 7 and rules.length_ratio.notna().all()
    own = rules.generated_tokens / rules.baseline_generated_tokens
    assert np.allclose(rules.length_ratio, own)
    assert np.allclose(rules.speedup_walltime, rules.speedup_tokens / rules.length_ratio)
    assert (rules.length_ratio_ci_low < rules.length_ratio).all()
    assert (rules.length_ratio < rules.length_ratio_ci_high).all()
    assert rows.out_of_head_per_1k.isna().all()  # needs the records: empty, never 0
    scores = rows.score_by_prompt.map(lambda cell: len(json.loads(cell)))
    assert (scores == 541).all()


def test_the_committed_instruction_counts_differ_from_lm_eval_only_by_the_drawn_letters():
    """The committed per-prompt table was re-scored without lm-eval's random state, which picks
    the letter of IFEval documents 19 and 22 (one letter instruction each): an arm's total may
    differ from its own lm-eval metric by at most those two instructions, and the builder now
    refuses such lines (claims_requests.check_instruction_total). Any other difference fails."""
    from cactus_bench.report.claims_requests import check_instruction_total

    rows = pd.read_csv(REPO / "results/paper_claims/paper_claims.csv")
    table = pd.read_csv(REPO / "results/paper_claims/paper_claims.requests.csv")
    differing = []
    for row in rows.itertuples():
        mine = table[table.run_id == row.run_id]
        total, followed = int(mine.inst_total.sum()), int(mine.inst_followed.sum())
        theirs = round(json.loads(row.metrics_json)["inst_level_strict_acc,none"] * total)
        assert abs(followed - theirs) <= 2, row.sampler
        if followed != theirs:
            differing.append(row.sampler if pd.isna(row.delta) else f"{row.sampler} {row.delta:g}")
            with pytest.raises(ValueError, match="re-score with `random` seeded"):
                check_instruction_total(row, followed, total)
        else:
            check_instruction_total(row, followed, total)
    assert differing == ["verifier", "sps", "cactus 0.5"]  # as the claims page says
