"""The paper's quality claims on one pair and task: the numbers behind docs/paper-claims-embedded.md
(`experiment=paper_claims`; report: `make tables plots CSV=results/paper_claims/paper_claims.csv
OUT=results/paper_claims`).

    arms = claim_arms(rows, requests)     # one line per arm: AL, both IFEval metrics, intervals
    verdicts = claim_verdicts(arms, mde)  # (a)-(d), each holds / does not hold / not resolved

Per arm: AL with the row's 95 % interval; IFEval's prompt-level strict accuracy (the row's
`score_by_prompt`) and instruction-level strict accuracy (instructions followed / instructions,
from the per-prompt table claims_requests.py writes), each against SpS and against the verifier
alone on the same prompts with the paired percentile bootstrap of leaderboard_power.py (2,000
resamples, numpy default_rng(0), the same resamples for every arm). The instruction-level
difference is a ratio of sums over one denominator (the prompts' instructions), so it is the mean
of the per-prompt d_i = (followed_arm - followed_ref) / mean(instructions) and takes the same
bootstrap. The AL difference (claim c) resamples both arms' accepted drafts and steps together.

The minimum detectable difference (MDE) is leaderboard_power's: (z_0.975 + z_0.8) sd / sqrt(n),
sd pooled over the per-prompt differences from SpS of every arm but SpS. Verdicts (CLAIMS), with
the paired 95 % interval [low, high] of a difference and the MDE as the margin:
- a score claim "X keeps Y's score" holds when low > -MDE (any loss is below what the run can
  detect), does not hold when high < 0, and is not resolved at this power otherwise;
- "X loses score against Y" holds when high < 0, does not hold when low > -MDE;
- "X's AL exceeds Y's" holds when low > 0, does not hold when high <= 0;
- (d) pairs FLy with the Cactus arm of the nearest AL; the AL is matched when their paired AL
  interval contains 0, and then Cactus keeps FLy's score by the first rule. Unmatched: not
  resolved at this power (the sweep has no Cactus δ at FLy's AL).
Each verdict is on the prompt-level metric, with the instruction level beside it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cactus_bench.report.leaderboard_power import (
    PAIRED_SEED,
    minimum_detectable_difference,
    paired_difference,
    pooled_sd,
)
from cactus_bench.store.bootstrap import BOOTSTRAP_RESAMPLES, percentile_interval, resample_counts

# The sweep's arms in the table's order: (label, sampler, delta or None)
ARMS = (
    ("verifier alone", "verifier", None),
    ("SpS", "sps", None),
    ("TAS", "tas", None),
    ("Cactus (δ = 0.5)", "cactus", 0.5),
    ("Cactus (δ = 1)", "cactus", 1.0),
    ("Cactus (δ = 2)", "cactus", 2.0),
    ("Cactus-exact (KL, δ = 1)", "cactus_exact", 1.0),
    ("FLy", "fly", None),
)
CACTUS = ("Cactus (δ = 0.5)", "Cactus (δ = 1)", "Cactus (δ = 2)", "Cactus-exact (KL, δ = 1)")
HOLDS, FAILS, OPEN = "holds", "does not hold", "not resolved at this power"


def arm_rows(rows: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """(label, row) for each arm of ARMS the rows have, in ARMS's order; one row per arm."""
    found = []
    for label, sampler, delta in ARMS:
        hit = rows[rows.sampler == sampler]
        if delta is not None:
            hit = hit[np.isclose(hit.delta.astype(float), delta)]
        if len(hit) > 1:
            raise ValueError(
                f"paper claims: {len(hit)} rows for {label}: keep one finished row per arm "
                "(one m, one budget) in the CSV"
            )
        if len(hit) == 1:
            found.append((label, hit.iloc[0]))
    return found


def _per_prompt(requests: pd.DataFrame | None, run_id: str, n: int) -> pd.DataFrame | None:
    if requests is None:
        return None
    part = requests[requests.run_id == run_id].sort_values("prompt")
    return part.reset_index(drop=True) if len(part) == n else None


def paired_ratio_difference(top_a, bottom_a, top_b, bottom_b) -> tuple[float, float, float]:
    """sum(top_a)/sum(bottom_a) - sum(top_b)/sum(bottom_b) over the same prompts and its paired
    95 % interval: each resample draws n prompts and both arms' counts come along."""
    arrays = [np.asarray(x, dtype=float) for x in (top_a, bottom_a, top_b, bottom_b)]
    estimate = arrays[0].sum() / arrays[1].sum() - arrays[2].sum() / arrays[3].sum()
    counts = resample_counts(
        arrays[0].size, BOOTSTRAP_RESAMPLES, np.random.default_rng(PAIRED_SEED)
    )
    sums = [counts @ x for x in arrays]  # [B] each
    low, high = percentile_interval(sums[0] / sums[1] - sums[2] / sums[3])
    return float(estimate), low, high


def claim_arms(rows: pd.DataFrame, requests: pd.DataFrame | None):
    """(one line per arm (module doc), the MDE per metric {"prompt", "inst": mde, "n": n},
    per arm its per-prompt scores and table {label: (scores [n], table or None)})."""
    arms = arm_rows(rows)
    if not any(label == "SpS" for label, _ in arms):
        raise ValueError("paper claims: the CSV has no SpS row to compare the rules with")
    hashes = {str(row.prompts_hash) for _, row in arms}
    if len(hashes) > 1:
        raise ValueError(
            f"paper claims: the arms scored different prompts (prompts_hash {sorted(hashes)}); "
            "report one sweep's CSV"
        )
    scores = {label: np.asarray(json.loads(row.score_by_prompt), float) for label, row in arms}
    n = len(scores["SpS"])
    tables = {label: _per_prompt(requests, row.run_id, n) for label, row in arms}
    have_inst = all(table is not None for table in tables.values())
    inst = {}
    if have_inst:
        mean_total = float(tables["SpS"].inst_total.mean())
        inst = {label: t.inst_followed.to_numpy(float) / mean_total for label, t in tables.items()}
    lines = []
    for label, row in arms:
        line = {
            "arm": label,
            "rule": row.sampler,
            "n_prompts": n,
            "al": row.al,
            "al_ci_low": row.al_ci_low,
            "al_ci_high": row.al_ci_high,
            "prompt_acc": scores[label].mean(),
            "prompt_acc_ci_low": row.score_ci_low,
            "prompt_acc_ci_high": row.score_ci_high,
            "params": row.get("sampler_params", ""),  # the rule's parameters as it ran
        }
        for metric, values in (("prompt", scores), ("inst", inst)):
            for ref, name in (("SpS", "sps"), ("verifier alone", "verifier")):
                keys = [f"{metric}_diff_{name}{end}" for end in ("", "_ci_low", "_ci_high")]
                if label in values and ref in values:
                    line.update(
                        zip(keys, paired_difference(values[label], values[ref]), strict=True)
                    )
        table = tables[label]
        if table is not None:
            line["inst_acc"] = table.inst_followed.sum() / table.inst_total.sum()
            counts = resample_counts(n, BOOTSTRAP_RESAMPLES, np.random.default_rng(PAIRED_SEED))
            ratio = (counts @ table.inst_followed.to_numpy(float)) / (
                counts @ table.inst_total.to_numpy(float)
            )
            line["inst_acc_ci_low"], line["inst_acc_ci_high"] = percentile_interval(ratio)
            line["ends_on_budget"] = float((table.stop_reason == "length").mean())
            sps = tables["SpS"]
            speculative = label not in ("SpS", "verifier alone") and table.steps.notna().all()
            if speculative and sps is not None:
                al_diff = paired_ratio_difference(
                    table.accepted, table.steps, sps.accepted, sps.steps
                )
                line.update(
                    zip(
                        ("al_diff_sps", "al_diff_sps_ci_low", "al_diff_sps_ci_high"),
                        al_diff,
                        strict=True,
                    )
                )
        lines.append(line)
    frame = pd.DataFrame(lines)
    mde = {"n": n}
    for metric, values in (("prompt", scores), ("inst", inst)):
        differences = [values[label] - values["SpS"] for label in values if label != "SpS"]
        if differences and n >= 2:
            mde[metric] = minimum_detectable_difference(pooled_sd(differences), n)
    return frame, mde, {label: (scores[label], tables[label]) for label, _ in arms}


@dataclass(frozen=True)
class Verdict:
    claim: str  # "a".."d"
    statement: str  # the claim as tested
    outcome: str  # HOLDS | FAILS | OPEN
    evidence: str  # the numbers behind it, one sentence


def _interval(value, low, high) -> str:
    return f"{100 * value:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]"


def keeps_score(low: float, high: float, mde: float) -> str:
    return HOLDS if low > -mde else FAILS if high < 0 else OPEN


def loses_score(low: float, high: float, mde: float) -> str:
    return HOLDS if high < 0 else FAILS if low > -mde else OPEN


def gains_al(low: float, high: float) -> str:
    return HOLDS if low > 0 else FAILS if high <= 0 else OPEN


def _score_evidence(line: pd.Series, versus: str) -> str:
    text = f"prompt level {_interval(*_diff(line, 'prompt', versus))}"
    if not pd.isna(line.get(f"inst_diff_{versus}", np.nan)):
        text += f", instruction level {_interval(*_diff(line, 'inst', versus))}"
    return text


def _diff(line: pd.Series, metric: str, versus: str) -> tuple[float, float, float]:
    name = f"{metric}_diff_{versus}"
    return line[name], line[f"{name}_ci_low"], line[f"{name}_ci_high"]


def claim_verdicts(arms: pd.DataFrame, mde: dict, per_prompt: dict) -> list[Verdict]:
    """(a)-(d) as module doc says, on the prompt-level metric; all three from claim_arms."""
    by = arms.set_index("arm")
    margin = mde["prompt"]
    out = []
    for label in [c for c in CACTUS if c in by.index]:
        line = by.loc[label]
        low, high = line.prompt_diff_sps_ci_low, line.prompt_diff_sps_ci_high
        evidence = f"{_score_evidence(line, 'sps')}; MDE {100 * margin:.1f} points"
        statement = f"{label} keeps SpS's score"
        out.append(Verdict("a", statement, keeps_score(low, high, margin), evidence))
    if "TAS" in by.index:
        line = by.loc["TAS"]
        low, high = line.prompt_diff_sps_ci_low, line.prompt_diff_sps_ci_high
        evidence = f"{_score_evidence(line, 'sps')}; MDE {100 * margin:.1f} points"
        statement = "TAS loses score against SpS"
        out.append(Verdict("b", statement, loses_score(low, high, margin), evidence))
    for label in [c for c in CACTUS if c in by.index]:
        line = by.loc[label]
        low, high = line.get("al_diff_sps_ci_low"), line.get("al_diff_sps_ci_high")
        if low is None or pd.isna(low):
            continue
        out.append(
            Verdict(
                "c",
                f"{label}'s AL exceeds SpS's",
                gains_al(low, high),
                f"AL {line.al:.3f} against SpS's {by.loc['SpS'].al:.3f}: difference "
                f"{line.al_diff_sps:+.3f} [{low:+.3f}, {high:+.3f}]",
            )
        )
    fly = "FLy"
    cactus = [c for c in CACTUS if c in by.index]
    if fly in by.index and cactus:
        nearest = min(cactus, key=lambda c: abs(by.loc[c].al - by.loc[fly].al))
        out.append(_matched(by, nearest, fly, per_prompt, margin))
    return out


def _matched(by: pd.DataFrame, label: str, fly: str, per_prompt: dict, margin: float) -> Verdict:
    """(d): the Cactus arm of the nearest AL against FLy (module doc)."""
    statement = f"{label} keeps FLy's score at matched AL"
    (ours, our_table), (theirs, their_table) = per_prompt[label], per_prompt[fly]
    if our_table is None or their_table is None:
        return Verdict("d", statement, OPEN, "no per-prompt table to pair the two arms' AL")
    al = paired_ratio_difference(
        our_table.accepted, our_table.steps, their_table.accepted, their_table.steps
    )
    text = (
        f"AL {by.loc[label].al:.3f} against FLy's {by.loc[fly].al:.3f}: difference "
        f"{al[0]:+.3f} [{al[1]:+.3f}, {al[2]:+.3f}]"
    )
    if not al[1] <= 0 <= al[2]:
        return Verdict("d", statement, OPEN, f"{text}: no Cactus δ of the sweep matches FLy's AL")
    estimate, low, high = paired_difference(ours, theirs)
    return Verdict(
        "d",
        statement,
        keeps_score(low, high, margin),
        f"{text}; prompt level {_interval(estimate, low, high)}; MDE {100 * margin:.1f} points",
    )
