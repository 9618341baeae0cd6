"""No behaviour change across refactors: a few runs on the tiny pair, compared column by column.

The fixture tests/fixtures/golden_rows.json was written by the code BEFORE the run package was
reorganised with `python tests/test_golden_rows.py --write`, and rewritten once since,
deliberately, when the CPU token draw changed from torch.multinomial to one uniform per token
(same law, other tokens for a seed; the greedy row stayed equal), and again when the HF
engine's draws became counter-based, keyed on seed and position (engine/draws.py: same laws,
other tokens; sampled rows rehashed through the `draws` setting, the greedy row unchanged,
hash included); regenerate it only
for a deliberate change of what a run measures, and say so in the commit. Compared: every CSV column
except those that are wall-clock times, ids, timestamps and the git state (they differ per run by
construction), plus the per-request records' token ids and per-step counts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "golden_rows.json"
sys.path.insert(0, str(REPO / "tests"))

# Each entry: Hydra overrides on top of model=tiny_random task=demo limit=2 max_new_tokens=8 m=3.
GOLDEN_CONFIGS: tuple[tuple[str, ...], ...] = (
    ("sampler=sps",),
    ("sampler=cactus", "delta=0.5"),
    ("sampler=cactus_exact", "delta=1.0", "sampler.divergence=chi2", "baseline=none"),
    ("sampler=tas", "m=2"),
    ("sampler=topk", "baseline=cached", "seed=7"),
    ("sampler=interp", "temperature=1.0", "top_k=0", "top_p=1.0"),
    ("sampler=greedy", "temperature=0", "m=1"),
    ("sampler=verifier",),
)

# Columns that are not a function of the config and the seeds.
VOLATILE = {
    "run_id",
    "timestamp",
    "git_sha",
    "git_dirty",
    "prefill_time_s",
    "draft_time_s",
    "verify_time_s",
    "sampler_time_s",
    "wall_time_spec_s",
    "wall_time_baseline_s",
    "tokens_per_s_spec",
    "tokens_per_s_baseline",
    "speedup_tokens",
    "speedup_tokens_ci_low",
    "speedup_tokens_ci_high",
    "speedup_walltime",
    "speedup_walltime_ci_low",
    "speedup_walltime_ci_high",
    "device_name",
    "torch_version",
    "transformers_version",
    "python_version",
    # timings' intervals and the machine's state during the run (load, drift, cached baseline)
    "tokens_per_s_spec_ci_low",
    "tokens_per_s_spec_ci_high",
    "tokens_per_s_baseline_ci_low",
    "tokens_per_s_baseline_ci_high",
    "tpot_median_s",
    "tpot_median_s_ci_low",
    "tpot_median_s_ci_high",
    "tpot_p90_s",
    "tpot_p90_s_ci_low",
    "tpot_p90_s_ci_high",
    "load_spec_start",
    "load_spec_end",
    "load_baseline_start",
    "load_baseline_end",
    "spec_drift",
    "baseline_drift",
    "drift_marked",
    "machine_state_json",
    "baseline_age_s",
    "baseline_load_gap",
}
RECORD_FIELDS = ("prompt_ids", "output_ids", "text", "stop_reason", "accepted_per_step", "seed")


def _run_one(tmp_path: Path, overrides: tuple[str, ...]) -> dict:
    """Run one config in a fresh results folder; the row's stable columns and its records."""
    import csv

    from helpers.runs import tiny_conf

    from cactus_bench.run import run

    conf = tiny_conf(tmp_path, *overrides)
    outcome = run(conf)
    with open(outcome.csv_path, newline="", encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    records_path = outcome.csv_path.with_suffix(".records.jsonl")
    records = []
    for line in records_path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        records.append({"arm": entry["arm"], **{k: entry.get(k) for k in RECORD_FIELDS}})
    return {
        "row": {k: v for k, v in row.items() if k not in VOLATILE},
        "records": records,
    }


@pytest.mark.slow
@pytest.mark.parametrize("overrides", GOLDEN_CONFIGS, ids=lambda o: "-".join(o))
def test_rows_match_the_golden_fixture(tmp_path, overrides):
    golden = json.loads(FIXTURE.read_text(encoding="utf-8"))[" ".join(overrides)]
    got = _run_one(tmp_path, overrides)
    for column in sorted(set(golden["row"]) | set(got["row"])):
        if column in golden["row"]:  # columns added later are new measurements, not changes
            assert got["row"].get(column) == golden["row"][column], column
    assert got["records"] == golden["records"]


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    out = {}
    for overrides in GOLDEN_CONFIGS:
        with tempfile.TemporaryDirectory() as tmp:
            out[" ".join(overrides)] = _run_one(Path(tmp), overrides)
            print("captured", " ".join(overrides), flush=True)
    lines = [
        f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}" for key, value in out.items()
    ]
    FIXTURE.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"wrote {FIXTURE}")
