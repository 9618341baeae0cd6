"""scripts/guards_pilot.py: the per-prompt table from run records, and the paired page."""

from __future__ import annotations

import csv
import json

from helpers.scripts import load_script


def load():
    return load_script("guards_pilot")


def row(tokens: int, stop: str, accepted=0, steps=1, ooh=0, loop=0) -> dict:
    return {
        "generated_tokens": str(tokens),
        "stop_reason": stop,
        "accepted": str(accepted),
        "steps": str(steps),
        "out_of_head_commits": str(ooh),
        "ends_in_loop": str(loop),
    }


def test_the_table_keeps_the_spec_arm_in_prompt_order(tmp_path):
    pilot = load()
    records = tmp_path / "records.jsonl"
    common = {"run_id": "r", "accepted_per_step": [1, 0, 2], "num_steps": 3}
    common |= {"out_of_head_commits": 1, "repeat_share": 0.25, "ends_in_loop": True}
    lines = [
        {**common, "arm": "spec", "request_index": 1, "stop_reason": "eos", "num_generated": 7},
        {**common, "arm": "baseline", "request_index": 0, "stop_reason": "eos", "num_generated": 9},
        {**common, "arm": "spec", "request_index": 0, "stop_reason": "length", "num_generated": 8},
    ]
    records.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    pilot.write_table(records, tmp_path / "table.csv")
    rows = list(csv.DictReader((tmp_path / "table.csv").open()))
    assert [(r["prompt"], r["generated_tokens"], r["accepted"]) for r in rows] == [
        ("0", "8", "3"),
        ("1", "7", "3"),
    ]
    assert rows[0]["ends_in_loop"] == "1" and rows[0]["stop_reason"] == "length"


def test_the_page_pairs_each_prompt_with_the_committed_arms():
    pilot = load()
    # two prompts: the guarded arm halves the verifier's length on one and caps on none
    committed = {
        "Verifier": {0: row(100, "length"), 1: row(100, "eos")},
        "SpS": {0: row(100, "length"), 1: row(50, "eos")},
        "Cactus (δ = 1)": {0: row(200, "length", 6, 4), 1: row(100, "length", 2, 4)},
    }
    guarded = {0: row(100, "eos", 3, 4, ooh=1), 1: row(50, "length", 1, 4, loop=1)}
    text = pilot.page({"Cactus (δ = 1) near_top=0.2": guarded}, committed)
    cells = [cell.strip() for cell in text.splitlines()[2].split("|")[1:-1]]
    assert cells[1] == "0.500 (1.000)"  # AL 4/8 against the bare arm's 8/8
    assert cells[2].startswith("0.750 [")  # 150 tokens against the verifier's 200
    assert cells[3] == "50 %"
    assert cells[4].startswith("+0.0 [")  # one cap each: SpS capped prompt 0, the arm prompt 1
    assert cells[5].startswith("-50.0 [")  # the bare arm capped both
    assert cells[6] == "6.7"  # 1 out-of-head commit in 150 tokens
    assert cells[7] == "1.00" and cells[8] == "0.0"  # the one capped answer loops
    assert "near_top=0.2 0 of 2" in text


def test_an_arm_in_both_runs_is_checked_against_itself():
    pilot = load()
    verifier = {0: row(100, "length", 0, 100, loop=1), 1: row(40, "eos", 0, 40)}
    committed = {
        "Verifier": {0: {**row(100, "length"), "accepted": ""}, 1: row(41, "eos", 0, 41)},
        "SpS": verifier,
        "Cactus (δ = 1)": verifier,
    }
    text = pilot.page({"Verifier": verifier}, committed)
    cells = [cell.strip() for cell in text.splitlines()[2].split("|")[1:-1]]
    assert cells[1].startswith("- (") and cells[6] == "-"  # no drafts: no AL, no out-of-head
    assert cells[7] == "1.00"
    # prompt 1 differs; prompt 0 matches though the committed verifier row left `accepted` empty
    assert "Verifier 1 of 2" in text
