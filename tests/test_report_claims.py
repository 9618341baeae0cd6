"""The paper-claims report (report/claims*.py) on FABRICATED rows: nothing here was measured.

541 prompts, every arm of the sweep, per-prompt scores and requests chosen by hand so that each
claim lands on a known side: TAS loses 60 prompts SpS gets right (b holds), Cactus δ = 1 gets
SpS's answers with more accepted drafts (a and c hold), Cactus δ = 2 loses 14 prompts and wins
8 (a not resolved), FLy has Cactus δ = 1's AL and answers (d holds), TAS has its AL but not
its answers (e holds).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from cactus_bench.report.claims import claim_arms, paired_ratio_difference
from cactus_bench.report.claims_figure import write_claims_figure
from cactus_bench.report.claims_page import claims_rows, write_claims_tables
from cactus_bench.report.claims_settings import ClaimSettings, claim_settings
from cactus_bench.report.claims_verdicts import (
    FAILS,
    HOLDS,
    OPEN,
    claim_verdicts,
    exceeds,
    keeps_score,
    loses_score,
    shown,
)
from cactus_bench.report.reference import load_reference

N = 541
RIGHT = set(range(108))  # SpS's right answers (about 20 %)
# label -> (sampler, delta, prompts right, accepted per step in 10 steps per prompt)
ARMS = {
    "verifier": ("verifier", None, RIGHT | {200}, None),
    "sps": ("sps", None, RIGHT, 5),
    "tas": ("tas", None, RIGHT - set(range(60)), 8),
    "cactus_0.5": ("cactus", 0.5, RIGHT, 7),
    "cactus_1.0": ("cactus", 1.0, RIGHT, 8),
    "cactus_2.0": ("cactus", 2.0, (RIGHT - set(range(14))) | set(range(300, 308)), 9),
    "cactus_exact_1.0": ("cactus_exact", 1.0, RIGHT, 8),
    "fly": ("fly", None, RIGHT, 8),
}


def fabricated(tmp_path, prompts: int = N):
    """The sweep's CSV and its per-prompt table, FABRICATED, in tmp_path."""
    rows, requests = [], []
    for index, (run, (sampler, delta, right, accepted)) in enumerate(ARMS.items()):
        scores = [1.0 if i in right else 0.0 for i in range(prompts)]
        al = None if accepted is None else accepted / 10
        rows.append(
            {
                "run_id": run,
                "status": "ok",
                "experiment": "paper_claims",
                "task": "ifeval",
                "sampler": sampler,
                "delta": delta,
                "m": 2,
                "n_prompts": prompts,
                "prompts_hash": "abc",
                "score_by_prompt": json.dumps(scores),
                "score": float(np.mean(scores)),
                "score_ci_low": 0.0,
                "score_ci_high": 1.0,
                "al": al,
                "al_ci_low": None if al is None else al - 0.05,
                "al_ci_high": None if al is None else al + 0.05,
                "repeats": 1,
                "model_pair": "FABRICATED pair",
                "device_name": "FABRICATED test fixture",
            }
        )
        for i in range(prompts):
            follows = 3 if i in right else 1 + (i + index) % 2
            requests.append(
                {
                    "run_id": run,
                    "prompt": i,
                    "stop_reason": "length" if i % 10 == index % 10 else "eos",
                    "generated_tokens": 100,
                    "accepted": None if al is None else accepted,
                    "steps": None if al is None else 10,
                    "prompt_strict": int(i in right),
                    "inst_followed": follows,
                    "inst_total": 3,
                }
            )
    csv = tmp_path / "paper_claims.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    table = pd.DataFrame(requests).astype({"accepted": "Int64", "steps": "Int64"})
    table.to_csv(tmp_path / "paper_claims.requests.csv", index=False)
    return csv


# small bootstrap settings for the fabricated sweeps (the experiment's own: 10,000 x 200 seeds)
QUICK = ClaimSettings({"prompt": 0.02, "inst": 0.02}, 2000, 4, 0.95)


def test_the_verdict_rules_read_the_interval_against_the_margin():
    assert keeps_score(-0.02, 0.03, 0.05) == HOLDS  # any loss below the margin
    assert keeps_score(-0.09, -0.01, 0.05) == FAILS  # significantly below
    assert keeps_score(-0.09, 0.01, 0.05) == OPEN
    assert loses_score(-0.09, -0.01, 0.05) == HOLDS
    assert loses_score(-0.02, 0.03, 0.05) == FAILS
    assert loses_score(-0.09, 0.01, 0.05) == OPEN
    assert (exceeds(0.1, 0.3), exceeds(-0.2, 0.0), exceeds(-0.1, 0.1)) == (HOLDS, FAILS, OPEN)


def test_keeps_never_holds_where_loses_does():
    """An interval inside the margin but below 0, e.g. [-3.5, -0.5] points with a 5-point
    margin: "loses" holds, so "keeps" does not (the precedence of claims_verdicts.py)."""
    low, high = -0.035, -0.005
    assert loses_score(low, high, 0.05) == HOLDS
    assert keeps_score(low, high, 0.05) == FAILS
    grid = np.linspace(-0.1, 0.1, 41)
    for a in grid:
        for b in grid[grid >= a]:
            assert not (keeps_score(a, b, 0.05) == HOLDS and loses_score(a, b, 0.05) == HOLDS)


def test_the_experiment_fixes_its_margins_before_the_run():
    settings = claim_settings("paper_claims")
    assert settings.margins == {"prompt": 0.05, "inst": 0.05}
    assert (settings.resamples, settings.stability_seeds) == (10_000, 200)
    assert settings.stable_share == 0.95


def test_an_unstable_outcome_reads_borderline():
    assert shown(HOLDS, 1.0, QUICK) == HOLDS
    assert shown(HOLDS, 0.74, QUICK) == "borderline (holds in 74 % of 4 seeds)"


def test_the_paired_ratio_difference_is_the_difference_of_ratios_of_sums():
    estimate, low, high = paired_ratio_difference([2, 4], [4, 4], [1, 1], [4, 4])
    assert estimate == pytest.approx(6 / 8 - 2 / 8)
    assert low <= estimate <= high


def test_each_claim_lands_where_the_fabricated_rows_put_it(tmp_path):
    csv = fabricated(tmp_path)
    arms, mde, per_prompt = claim_arms(
        claims_rows(csv), pd.read_csv(tmp_path / "paper_claims.requests.csv"), QUICK.resamples
    )
    by = arms.set_index("rule")
    tas = arms.set_index("arm").loc["TAS"]
    assert tas.prompt_diff_sps == pytest.approx(-60 / N)
    assert tas.prompt_diff_sps_ci_high < 0
    # instruction level: followed / instructions, a ratio of sums over the same instructions
    sps = arms.set_index("arm").loc["SpS"]
    assert sps.inst_acc == pytest.approx(
        (108 * 3 + sum(1 + (i + 1) % 2 for i in range(108, N))) / (3 * N)
    )
    assert by.loc["verifier"].prompt_diff_sps == pytest.approx(1 / N)
    assert math.isnan(by.loc["verifier"].get("al_diff_sps", math.nan))
    assert sps.ends_on_budget == pytest.approx(len(range(1, N, 10)) / N)
    # the budget share pairs with SpS's: TAS ends on it at i % 10 == 2, SpS at i % 10 == 1
    assert tas.budget_diff_sps == pytest.approx((len(range(2, N, 10)) - len(range(1, N, 10))) / N)
    assert tas.budget_diff_sps_ci_low < tas.budget_diff_sps < tas.budget_diff_sps_ci_high
    assert 0 < mde["prompt"] < 0.1 and mde["n"] == N
    found = {(v.claim, v.statement): v for v in claim_verdicts(arms, per_prompt, QUICK)}
    verdicts = {key: verdict.outcome for key, verdict in found.items()}
    assert verdicts[("a", "Cactus (δ = 1) keeps SpS's score")] == HOLDS
    assert verdicts[("b", "TAS loses score against SpS")] == HOLDS
    assert verdicts[("c", "Cactus (δ = 1)'s AL exceeds SpS's (by construction)")] == HOLDS
    assert verdicts[("d", "Cactus (δ = 1) keeps FLy's score at FLy's AL")] == HOLDS
    assert all(0 <= verdict.stability <= 1 for verdict in found.values())
    # (e): TAS lost 60 prompts Cactus δ = 1 keeps, at the same AL: +11 points on either metric
    above_tas = found[("e", "Cactus (δ = 1) scores above TAS at matched AL")]
    assert (above_tas.outcome, above_tas.inst_outcome) == (HOLDS, HOLDS)
    assert "prompt level +11.1 points" in above_tas.evidence
    # each score verdict reads both metrics, each against its own MDE
    tas_loss = found[("b", "TAS loses score against SpS")]
    assert tas_loss.inst_outcome == HOLDS and "instruction level -" in tas_loss.evidence
    loss = arms.set_index("arm").loc["Cactus (δ = 2)"]
    margin = QUICK.margins["prompt"]
    expected = keeps_score(loss.prompt_diff_sps_ci_low, loss.prompt_diff_sps_ci_high, margin)
    assert verdicts[("a", "Cactus (δ = 2) keeps SpS's score")] == expected == OPEN


def test_the_page_writes_verdicts_only_for_a_finished_sweep_and_rebuilds_byte_for_byte(tmp_path):
    reference = load_reference()
    finished = tmp_path / "finished"
    finished.mkdir()
    table_csv, page = write_claims_tables(fabricated(finished), finished / "out", reference, QUICK)
    text = page.read_text()
    assert "**holds**" in text and "Not written" not in text
    assert "| SpS | 0.50 [0.45, 0.55] | 20.0 [0.0, 100.0] | +0.0 [+0.0, +0.0] |" in text
    assert "| 10.0 | +0.0 [+0.0, +0.0] |" in text  # SpS ends on the budget, against itself
    first = {path: path.read_bytes() for path in (table_csv, page)}
    csv = finished / "paper_claims.csv"
    figures = write_claims_figure(csv, claims_rows(csv), finished / "fig", QUICK)
    first |= {path: path.read_bytes() for path in figures}
    write_claims_tables(csv, finished / "out", reference, QUICK)
    write_claims_figure(csv, claims_rows(csv), finished / "fig", QUICK)
    assert all(path.read_bytes() == data for path, data in first.items())
    short = tmp_path / "short"
    short.mkdir()
    _, page = write_claims_tables(fabricated(short, prompts=40), short / "out", reference, QUICK)
    assert "Not written: the sweep has not finished" in page.read_text()
    assert "**holds**" not in page.read_text()


def test_the_per_prompt_table_rescores_each_answer_and_refuses_a_disagreement(tmp_path):
    """write_requests reads the run's own records (arm spec) in request order, re-scores each
    answer with the scorer it is given and checks it against the row's score_by_prompt."""
    from cactus_bench.report.claims_requests import load_requests, write_requests

    csv = tmp_path / "paper_claims.csv"
    row = {
        "run_id": "r1",
        "status": "ok",
        "task": "ifeval",
        "sampler": "sps",
        "repeats": 1,
        "seed": 1234,
        "score_by_prompt": json.dumps([1.0, 0.0]),
        "metrics_json": json.dumps({"inst_level_strict_acc,none": 3 / 4}),
    }
    pd.DataFrame([row]).to_csv(csv, index=False)
    records = [
        {"run_id": "r1", "arm": "baseline", "request_index": 0, "text": "ignored"},
        {
            "run_id": "r1",
            "arm": "spec",
            "request_index": 1,
            "text": "no",
            "stop_reason": "length",
            "output_ids": [1, 2, 3],
            "num_draft_tokens": 2,
            "accepted_per_step": [2, 0],
        },
        {
            "run_id": "r1",
            "arm": "spec",
            "request_index": 0,
            "text": "yes",
            "stop_reason": "eos",
            "output_ids": [1],
            "num_draft_tokens": 2,
            "accepted_per_step": [1],
            "out_of_head_commits": 1,  # the record's per-request diagnostics (engine/record.py)
            "repeat_share": 0.25,
            "ends_in_loop": True,
        },
    ]
    path = tmp_path / "paper_claims.records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))

    def score_one(text):
        follows = [True, True] if text == "yes" else [False, True]
        return {"prompt_level_strict_acc": all(follows), "inst_level_strict_acc": follows}

    seeds = []

    def score(seed, texts):  # lm-eval's results per document, as the run scored them
        seeds.append(seed)
        return [score_one(text) for text in texts]

    write_requests(csv, score)
    assert seeds == [1234]
    table = load_requests(csv)
    assert table.stop_reason.tolist() == ["eos", "length"]
    assert table.prompt_strict.tolist() == [1, 0]
    assert table.inst_followed.tolist() == [2, 1] and table.inst_total.tolist() == [2, 2]
    assert table.accepted.tolist() == [1, 2] and table.steps.tolist() == [1, 2]
    assert table.out_of_head[0] == 1 and table.ends_in_loop[0] == 1
    assert table.repeat_share[0] == 0.25 and table.iloc[1, -3:].isna().all()  # older records
    with pytest.raises(ValueError, match="prompt 0: IFEval re-scores its answer 0") as caught:
        write_requests(csv, lambda seed, texts: [score_one("no") for _ in texts])
    assert "\n" not in str(caught.value)
    # lines whose instructions do not sum to the row's own lm-eval metric refuse
    pd.DataFrame([{**row, "metrics_json": json.dumps({"inst_level_strict_acc,none": 0.5})}]).to_csv(
        csv, index=False
    )
    with pytest.raises(ValueError, match="follow 3 of 4 instructions, the row's lm-eval metric 2"):
        write_requests(csv, score)
    pd.DataFrame([row]).to_csv(csv, index=False)

    # Another machine, without the records: r1's committed lines stay; r2 is re-scored from its
    # records; a row with neither refuses; a committed line that contradicts its row refuses.
    rows = [row, {**row, "run_id": "r2", "score_by_prompt": json.dumps([0.0, 1.0])}]
    pd.DataFrame(rows).to_csv(csv, index=False)
    swapped = {"yes": "no", "no": "yes"}
    moved = [{**r, "run_id": "r2", "text": swapped.get(r["text"], "")} for r in records]
    path.write_text("".join(json.dumps(r) + "\n" for r in moved))
    write_requests(csv, score)
    table = load_requests(csv)
    assert table.run_id.tolist() == ["r1", "r1", "r2", "r2"]
    assert table.prompt_strict.tolist() == [1, 0, 0, 1]
    assert table.accepted.tolist() == [1, 2, 1, 2]
    path.unlink()
    third = {**row, "run_id": "r3"}
    pd.DataFrame([*rows, third]).to_csv(csv, index=False)
    with pytest.raises(ValueError, match="run r3 .* has 0 records for 2 prompts"):
        write_requests(csv, score)
    pd.DataFrame([{**row, "score_by_prompt": json.dumps([0.0, 0.0])}]).to_csv(csv, index=False)
    with pytest.raises(ValueError, match="run r1 .* prompt 0: the per-prompt table says 1"):
        write_requests(csv, score)


def test_the_experiment_sweeps_exactly_the_reports_arms():
    """configs/experiment/paper_claims.yaml and report/claims.py's ARMS and LENGTH_ARMS name the
    same arms, at the settings the page states (541 prompts, batch 8, m = 2, cached baseline,
    <= 512 tokens); the one arm at another m (SpS at m = 1) is the Makefile's second command.
    The sweep's order is its own (the claims' arms run first); the table keeps the report's."""
    from pathlib import Path

    from helpers.runs import compose_cfg, compose_run_conf, sweep_params

    from cactus_bench.report.claims import ARMS as REPORT_ARMS
    from cactus_bench.report.claims import LENGTH_ARMS, SWEEP_M
    from cactus_bench.run.checks import validate

    params = sweep_params(compose_cfg(["experiment=paper_claims"], hydra_node=True))
    assert params["task"] == ["ifeval"] and params["model"] == ["smollm2_135m"]
    commands = [[f"sampler={preset}"] for preset in params["sampler"]]
    make = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    assert "experiment=paper_claims data_dir=$(abspath $(DATA_DIR)) sampler=sps m=1" in make
    commands.append(["sampler=sps", "m=1"])
    ran = []
    for command in commands:
        conf = compose_run_conf(["experiment=paper_claims", "task=ifeval", *command])
        assert (conf.limit, conf.batch, conf.baseline) == (None, 8, "cached")
        assert conf.max_new_tokens <= 512
        rule_params = validate(conf)
        guards = sorted(rule_params.guards_set().items())  # those set away from their defaults
        key = (rule_params.rule, rule_params.values().get("delta"), conf.m, guards)
        ran.append(key)
        if rule_params.rule == "fly":
            assert rule_params.window == 1  # vLLM's min(6, m - 1)
        if rule_params.rule == "cactus_exact":
            assert rule_params.divergence == "kl"
    assert len({str(key) for key in ran}) == len(ran)
    reported = [
        (arm.sampler, arm.delta, arm.m, sorted(arm.guards)) for arm in REPORT_ARMS + LENGTH_ARMS
    ]
    assert sorted(map(str, ran)) == sorted(map(str, reported))
    assert SWEEP_M == 2 and sum(key[2] != SWEEP_M for key in ran) == 1


def test_a_score_verdict_gives_each_metric_its_own_outcome():
    """A loss inside the prompt level's MDE can be significant at the instruction level (more
    instructions than prompts): the verdict carries both outcomes, not the first one only."""
    from cactus_bench.report.claims_verdicts import _score_verdict

    differences = {"prompt": (-0.006, -0.039, 0.028), "inst": (-0.032, -0.062, -0.002)}
    verdict = _score_verdict("a", "X keeps SpS's score", differences, MARGINS, keeps_score)
    assert (verdict.outcome, verdict.inst_outcome) == (HOLDS, FAILS)
    assert verdict.evidence == (
        "prompt level -0.6 points [-3.9, +2.8], instruction level -3.2 points [-6.2, -0.2]; "
        "margin 4.5 / 4.1 points"
    )
    prompt_only = _score_verdict("a", "X", {"prompt": differences["prompt"]}, MARGINS, keeps_score)
    assert prompt_only.inst_outcome is None and prompt_only.evidence.endswith("margin 4.5 points")


MARGINS = {"prompt": 0.045, "inst": 0.041}


def test_an_unmatched_al_leaves_the_matched_claims_open_with_their_scores(tmp_path):
    """(d) and (e) only judge a score at matched AL: FLy drafting far less than every Cactus
    arm gets "not resolved", with the AL gap and the unmatched score difference as evidence."""
    csv = fabricated(tmp_path)
    rows, requests = claims_rows(csv), pd.read_csv(tmp_path / "paper_claims.requests.csv")
    fly = rows.sampler == "fly"
    rows.loc[fly, "al"] = 0.2
    requests.loc[requests.run_id == "fly", "accepted"] = 2
    arms, mde, per_prompt = claim_arms(rows, requests, QUICK.resamples)
    found = {v.claim: v for v in claim_verdicts(arms, per_prompt, QUICK) if v.claim == "d"}
    assert found["d"].outcome == OPEN and found["d"].inst_outcome == OPEN
    assert "not matched (every Cactus δ of the sweep lies above it): score, unmatched" in (
        found["d"].evidence
    )


def test_the_page_quotes_the_committed_verdicts_word_for_word():
    """docs/paper-claims-embedded.md quotes the verdicts of the committed table; a rebuilt table
    with other verdicts must show here (one source: the table file)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    table = root / "results/paper_claims/tables/paper_claims.md"
    verdicts = [line for line in table.read_text().splitlines() if line.startswith("- (")]
    page = (root / "docs/paper-claims-embedded.md").read_text().splitlines()
    quoted = [line for line in page if line.startswith("- (")]
    assert len(verdicts) >= 5 and quoted == verdicts


def test_guarded_arms_are_lines_of_their_own_and_the_length_section_reads_them(tmp_path):
    """A Cactus δ = 1 row with a guard set is its own arm, not a second 'Cactus (δ = 1)' row; the
    length section appears only with such rows and says which guard removes the inflation."""
    from cactus_bench.report.claims import arm_rows
    from cactus_bench.report.claims_length import HEADING

    csv = fabricated(tmp_path)
    _, page = write_claims_tables(csv, tmp_path / "bare", None, QUICK)
    assert HEADING not in page.read_text()  # a sweep without the study's arms: no section
    rows, requests = pd.read_csv(csv), pd.read_csv(tmp_path / "paper_claims.requests.csv")
    rows["sampler_params"] = None  # the fabricated rows name no parameters: no guard set
    bare = rows[rows.run_id == "cactus_1.0"].iloc[0]
    for run, guard, reason in (("stop", "stop", "eos"), ("near", "near_top", "length")):
        value = "exact" if guard == "stop" else 0.2
        params = json.dumps({"delta": 1.0, guard: value})
        rows.loc[len(rows)] = {**bare, "run_id": run, "sampler_params": params}
        mine = requests[requests.run_id == "cactus_1.0"].assign(run_id=run, stop_reason=reason)
        requests = pd.concat([requests, mine], ignore_index=True)
    rows.to_csv(csv, index=False)
    requests.to_csv(tmp_path / "paper_claims.requests.csv", index=False)
    labels = [label for label, _ in arm_rows(claims_rows(csv))]
    assert labels[-2:] == ["Cactus (δ = 1) stop=exact", "Cactus (δ = 1) near_top=0.2"]
    assert labels.count("Cactus (δ = 1)") == 1
    _, page = write_claims_tables(csv, tmp_path / "guarded", None, QUICK)
    text = page.read_text()
    assert HEADING in text and text.index(HEADING) < text.index("## Verdicts")
    assert "- Cactus (δ = 1) stop=exact removes the cap-out inflation" in text  # never capped
    assert "- Cactus (δ = 1) near_top=0.2 does not remove the cap-out inflation" in text
