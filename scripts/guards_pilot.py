"""Does a guard remove the cap-out inflation? The 100-prompt pilot, paired per prompt.

The pilot decoded IFEval's first 100 prompts with Cactus (delta = 1) under `near_top: 0.2` and
under `stop: exact`, and the first 16 with bare Cactus (delta = 1) to check that today's code
decodes the committed run's answers again (configs/experiment/paper_claims.yaml's settings, no
baseline: `baseline=none limit=100 results_dir=results/paper_claims_pilot`). Each rule draws
from the same per-request seeds, so a pilot answer pairs with the committed run's answer to the
same prompt (results/paper_claims/paper_claims.requests.csv: the verifier alone, SpS and every
committed rule). This script writes the pilot's per-prompt table from its records and the
comparison page from the two tables (10,000 paired bootstrap resamples over prompts, seed 0).

  python scripts/guards_pilot.py --records results/paper_claims_pilot/paper_claims.records.jsonl
  python scripts/guards_pilot.py   # the page again from the committed per-prompt table
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

PILOT = Path("results/paper_claims_pilot")
COMMITTED = Path("results/paper_claims")
FIELDS = ("run_id", "prompt", "stop_reason", "generated_tokens", "accepted", "steps")
FIELDS += ("out_of_head_commits", "repeat_share", "ends_in_loop")
RESAMPLES, SEED = 10_000, 0


def write_table(records: Path, out: Path) -> None:
    """The pilot's per-prompt table from its run records (the spec arm only)."""
    rows = []
    for line in records.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["arm"] != "spec":
            continue
        rows.append(
            {
                "run_id": record["run_id"],
                "prompt": record["request_index"],
                "stop_reason": record["stop_reason"],
                "generated_tokens": record["num_generated"],
                "accepted": sum(record["accepted_per_step"]),
                "steps": record["num_steps"],
                "out_of_head_commits": record["out_of_head_commits"],
                "repeat_share": round(record["repeat_share"], 6),
                "ends_in_loop": int(record["ends_in_loop"]),
            }
        )
    rows.sort(key=lambda row: (row["run_id"], row["prompt"]))
    with out.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def arm_label(row: dict) -> str:
    label = {"cactus_exact": "Cactus-exact", "sps": "SpS", "tas": "TAS", "fly": "FLy"}
    name = label.get(row["sampler"], row["sampler"].capitalize())
    if row.get("delta"):
        name += f" (δ = {float(row['delta']):g})"
    guards = [
        f"{key}={row[key]}"
        for key in ("stop", "near_top")
        if row.get(key) not in (None, "", "off", "0.0", "0")
    ]
    return " ".join([name, *guards])


def arms(directory: Path, table: str) -> dict[str, dict[int, dict]]:
    """{arm label: {prompt: its row of the per-prompt table}}."""
    labels = {
        row["run_id"]: arm_label(row)
        for row in csv.DictReader((directory / "paper_claims.csv").open(encoding="utf-8"))
    }
    out: dict[str, dict[int, dict]] = {}
    for row in csv.DictReader((directory / table).open(encoding="utf-8")):
        out.setdefault(labels[row["run_id"]], {})[int(row["prompt"])] = row
    return out


def paired(a: np.ndarray, b: np.ndarray, statistic) -> tuple[float, float, float]:
    """The statistic and its 95 % paired bootstrap interval over prompts."""
    rng = np.random.default_rng(SEED)
    picks = rng.integers(0, len(a), size=(RESAMPLES, len(a)))
    draws = np.sort([statistic(a[p], b[p]) for p in picks])
    return statistic(a, b), draws[int(0.025 * RESAMPLES)], draws[int(0.975 * RESAMPLES) - 1]


def ratio(a, b):
    return a.sum() / b.sum()


def diff_points(a, b):
    return 100 * (a.mean() - b.mean())


def page(pilot: dict, committed: dict) -> str:
    lines = ["| arm (prompts) | AL (bare Cactus δ = 1) | λ vs the verifier | ends on budget |"]
    lines[0] += " vs SpS (points) | vs bare Cactus δ = 1 (points) | out-of-head /1k |"
    lines[0] += " capped: loop share | capped: out-of-head /1k |"
    lines.append("|---" + "|---:" * 8 + "|")
    bare = committed["Cactus (δ = 1)"]
    for label, rows in sorted(pilot.items()):
        prompts = sorted(rows)

        def column(table, key, prompts=prompts):
            return np.array([float(table[i][key] or 0) for i in prompts])

        def capped(table, prompts=prompts):
            return np.array([table[i]["stop_reason"] == "length" for i in prompts], dtype=float)

        tokens = column(rows, "generated_tokens")
        speculative = column(rows, "accepted").sum() > 0  # the verifier alone drafts nothing
        al = column(rows, "accepted").sum() / column(rows, "steps").sum()
        al_bare = column(bare, "accepted").sum() / column(bare, "steps").sum()
        lam = paired(tokens, column(committed["Verifier"], "generated_tokens"), ratio)
        vs_sps = paired(capped(rows), capped(committed["SpS"]), diff_points)
        vs_bare = paired(capped(rows), capped(bare), diff_points)
        ooh = 1000 * column(rows, "out_of_head_commits").sum() / tokens.sum()
        cut = [i for i in prompts if rows[i]["stop_reason"] == "length"]
        loops = column(rows, "ends_in_loop", cut).mean()
        ooh_cut = 1000 * column(rows, "out_of_head_commits", cut).sum()
        ooh_cut /= column(rows, "generated_tokens", cut).sum()
        lines.append(
            f"| {label} ({len(prompts)}) | {f'{al:.3f}' if speculative else '-'} ({al_bare:.3f}) "
            f"| {lam[0]:.3f} [{lam[1]:.3f}, {lam[2]:.3f}] | {100 * capped(rows).mean():.0f} % "
            f"| {vs_sps[0]:+.1f} [{vs_sps[1]:+.1f}, {vs_sps[2]:+.1f}] "
            f"| {vs_bare[0]:+.1f} [{vs_bare[1]:+.1f}, {vs_bare[2]:+.1f}] "
            f"| {f'{ooh:.1f}' if speculative else '-'} "
            f"| {loops:.2f} | {f'{ooh_cut:.1f}' if speculative else '-'} |"
        )

    def same(rows: dict, reference: dict) -> int:
        return sum(
            int(rows[i]["generated_tokens"]) == int(reference[i]["generated_tokens"])
            and int(rows[i]["accepted"] or 0) == int(reference[i]["accepted"] or 0)
            for i in rows
        )

    lines.append("")
    lines.append(
        "Answers equal in length and accepted drafts to the committed run's answer to the same "
        "prompt, by the same arm (today's code decodes it again) or, for a guarded arm, by bare "
        "Cactus (δ = 1) (the decodes the guard leaves alone): "
        + "; ".join(
            f"{label} {same(rows, committed.get(label, bare))} of {len(rows)}"
            for label, rows in sorted(pilot.items())
        )
        + "."
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, help="the pilot's records: rewrite its table")
    args = parser.parse_args(argv)
    if args.records:
        write_table(args.records, PILOT / "paper_claims.requests.csv")
    text = page(
        arms(PILOT, "paper_claims.requests.csv"), arms(COMMITTED, "paper_claims.requests.csv")
    )
    (PILOT / "guards_pilot.md").write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
