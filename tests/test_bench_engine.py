"""cactus_bench.bench.engine_arms (scripts/bench_engine.py) on the tiny pair: every arm makes
exactly the requested tokens, the summary rows hold what the CSV's columns name, and the machine
the numbers came from is in the row's context."""

from __future__ import annotations

import csv

import pytest

from cactus_bench.bench.engine_arms import (
    ARMS,
    METRICS,
    EngineBench,
    add_ratios,
    append_rows,
    encode_prompts,
    row_context,
    run_arms,
    summarise,
)
from cactus_bench.bench.models import load_named_pair


def test_arms_on_the_tiny_pair_make_rows_with_ratios_and_machine_columns():
    bench = EngineBench(max_new_tokens=6, prompts=2, repeats=1)
    drafter, verifier, tokenizer, token_map, chat_kwargs = load_named_pair("tiny", "cpu", None)
    prompts = encode_prompts(tokenizer, chat_kwargs, bench.prompts)
    results = run_arms(bench, ARMS, drafter, verifier, tokenizer, token_map, prompts)
    rows = [summarise(arm, results[arm]) for arm in ARMS]
    add_ratios(rows)
    by_arm = {row["arm"]: row for row in rows}
    for row in rows:  # EOS ignored: every request makes exactly max_new_tokens tokens
        assert row["requests"] == 2 and row["new_tokens"] == 12, row
        assert set(row) <= set(METRICS)
    assert by_arm["ours_ar"]["speedup_vs_ours_ar"] == 1.0
    assert by_arm["ours_ar"]["accepted_length"] == 0  # no drafts: one verifier step per token
    spec = by_arm["ours_spec"]
    assert 1 <= spec["tokens_per_step"] <= bench.m + 1
    assert spec["tokens_per_step"] == pytest.approx(spec["accepted_length"] + 1)
    assert spec["ideal_speedup"] > 0 and "ideal_speedup" not in by_arm["hf_assisted"]
    assert "steps" not in by_arm["hf_ar"]  # transformers' arms report no per-step times
    context = row_context(bench)
    assert {"cpu", "isa", "load_1m", "threads", "pair", "m", "torch"} <= set(context)
    assert not set(context) & set(METRICS)


def test_rows_append_under_the_header_an_older_file_gains(tmp_path):
    """A CSV written before the cpu / isa / load_1m columns is rewritten once with them (old rows
    keep every cell, the new ones empty); a file with unknown columns is refused."""
    context = row_context(EngineBench())
    old_columns = [c for c in context if c not in ("cpu", "isa", "load_1m")] + list(METRICS)
    out = tmp_path / "engine.csv"
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=old_columns)
        writer.writeheader()
        writer.writerow({**dict.fromkeys(old_columns, "7"), "arm": "ours_ar"})
    append_rows(out, context, [{"arm": "ours_spec", "tokens_per_s": 9.5}])
    with out.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header, rows = reader.fieldnames, list(reader)
    assert header == list(context) + list(METRICS)
    assert rows[0]["arm"] == "ours_ar" and rows[0]["tokens_per_s"] == "7" and rows[0]["cpu"] == ""
    assert rows[1]["arm"] == "ours_spec" and rows[1]["tokens_per_s"] == "9.5"
    assert rows[1]["cpu"] == str(context["cpu"]) and rows[1]["steps"] == ""
    stranger = tmp_path / "other.csv"
    stranger.write_text("when,what\n1,2\n")
    with pytest.raises(SystemExit, match="other columns"):
        append_rows(stranger, context, [])
