"""The paper's quality claims on one pair and task: the numbers behind docs/paper-claims-embedded.md
(`experiment=paper_claims`; report: `make tables plots CSV=results/paper_claims/paper_claims.csv
OUT=results/paper_claims`).

    arms, mde, per_prompt = claim_arms(rows, requests)  # a line per arm, the MDE, per prompt
    verdicts = claim_verdicts(arms, per_prompt, settings)  # claims_verdicts.py

Per arm: AL with the row's 95 % interval; IFEval's prompt-level strict accuracy (the row's
`score_by_prompt`) and instruction-level strict accuracy (instructions followed / instructions,
from the per-prompt table claims_requests.py writes), each against SpS and against the verifier
alone on the same prompts with the paired percentile bootstrap of leaderboard_power.py (the
experiment's resamples, 10,000 for paper_claims; numpy default_rng(0), the same for every arm).
The instruction-level difference is a ratio of sums over one denominator (the prompts'
instructions), so it is the mean of the per-prompt d_i = (followed_arm - followed_ref) /
mean(instructions) and takes the same bootstrap. The AL difference (claim c) resamples both
arms' accepted drafts and steps together.
The share of answers that end on the token budget gets the same paired difference from SpS.

The minimum detectable difference (MDE) is leaderboard_power's: (z_0.975 + z_0.8) sd / sqrt(n),
sd pooled over the per-prompt differences from SpS of every arm but SpS, one per metric: the
run's power, printed beside the verdicts, whose margins are fixed before the run instead
(claims_settings.py, claims_verdicts.py).
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

# The experiment's draft length (configs/experiment/paper_claims.yaml; a test holds them equal):
# an arm drafts it unless it names another m
SWEEP_M = 2
# the guard columns (docs/rules.md, Guards) that tell a guarded arm from its bare rule: a row's
# `sampler_params` names a guard only where it was set away from its default
GUARDS = ("stop", "strict_first", "relax_in", "near_top")


@dataclass(frozen=True)
class Arm:
    """One line of the table: the rows of `sampler` at `delta` (None: any), draft length `m`
    (the verifier alone drafts nothing) and exactly the guards `guards` set."""

    label: str
    sampler: str
    delta: float | None = None
    m: int = SWEEP_M
    guards: tuple[tuple[str, object], ...] = ()

    def matches(self, row: pd.Series) -> bool:
        if row.sampler != self.sampler:
            return False
        if self.delta is not None and not np.isclose(float(row.delta), self.delta):
            return False
        if self.sampler != "verifier" and int(row.m) != self.m:
            return False
        return row_guards(row) == dict(self.guards)


def row_guards(row: pd.Series) -> dict:
    """{guard: value} of the guards the row set (its `sampler_params`; none in older rows)."""
    params = row.get("sampler_params")
    found = json.loads(params) if isinstance(params, str) and params else {}
    return {name: found[name] for name in GUARDS if name in found}


# The claims' arms in the table's order: every one is needed before verdicts are written
ARMS = (
    Arm("verifier alone", "verifier"),
    Arm("SpS", "sps"),
    Arm("TAS", "tas"),
    Arm("Cactus (δ = 0.5)", "cactus", 0.5),
    Arm("Cactus (δ = 1)", "cactus", 1.0),
    Arm("Cactus (δ = 2)", "cactus", 2.0),
    Arm("Cactus-exact (KL, δ = 1)", "cactus_exact", 1.0),
    Arm("FLy", "fly"),
)
# The length study's arms (docs/paper-claims-embedded.md, "Does a guard remove the cap-out
# inflation?"), after the claims' arms: lines of the table where the CSV has their rows
LENGTH_ARMS = (
    Arm("Cactus (δ = 1) stop=exact", "cactus", 1.0, guards=(("stop", "exact"),)),
    Arm("Cactus (δ = 1) near_top=0.2", "cactus", 1.0, guards=(("near_top", 0.2),)),
    Arm("near-top rule (α = 0.2)", "topband"),
    Arm("SpS (m = 1)", "sps", m=1),
    Arm("Cactus (δ = 0.05)", "cactus", 0.05),
    Arm("Cactus (δ = 0.25)", "cactus", 0.25),
)
# the row's length columns each line carries (against the verifier alone)
LENGTH_LINE = (
    "mean_answer_tokens",
    "length_ratio",
    "length_ratio_ci_low",
    "length_ratio_ci_high",
    "speedup_tokens",
    "speedup_walltime",
)
# the Cactus arms the claims judge (claims_verdicts.py), each where the CSV has its row
CACTUS = (
    "Cactus (δ = 0.5)",
    "Cactus (δ = 1)",
    "Cactus (δ = 2)",
    "Cactus-exact (KL, δ = 1)",
    "Cactus (δ = 0.05)",
    "Cactus (δ = 0.25)",
)


def arm_rows(rows: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """(label, row) for each arm of ARMS and LENGTH_ARMS the rows have, in that order; one row
    per arm."""
    found = []
    for arm in ARMS + LENGTH_ARMS:
        hit = [row for _, row in rows.iterrows() if arm.matches(row)]
        if len(hit) > 1:
            raise ValueError(
                f"paper claims: {len(hit)} rows for {arm.label}: keep one finished row per arm "
                "(one m, one budget) in the CSV"
            )
        if len(hit) == 1:
            found.append((arm.label, hit[0]))
    return found


def _per_prompt(requests: pd.DataFrame | None, run_id: str, n: int) -> pd.DataFrame | None:
    if requests is None:
        return None
    part = requests[requests.run_id == run_id].sort_values("prompt")
    return part.reset_index(drop=True) if len(part) == n else None


def paired_ratio_difference(
    top_a, bottom_a, top_b, bottom_b, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float, float]:
    """sum(top_a)/sum(bottom_a) - sum(top_b)/sum(bottom_b) over the same prompts and its paired
    95 % interval: each resample draws n prompts and both arms' counts come along."""
    arrays = [np.asarray(x, dtype=float) for x in (top_a, bottom_a, top_b, bottom_b)]
    estimate = arrays[0].sum() / arrays[1].sum() - arrays[2].sum() / arrays[3].sum()
    counts = resample_counts(arrays[0].size, resamples, np.random.default_rng(PAIRED_SEED))
    sums = [counts @ x for x in arrays]  # [B] each
    low, high = percentile_interval(sums[0] / sums[1] - sums[2] / sums[3])
    return float(estimate), low, high


def instruction_terms(tables: dict) -> dict:
    """{label: [n] instructions followed per prompt / mean instructions per prompt}: the terms
    whose paired differences are the instruction-level differences (module doc). The arms
    scored the same prompts, so any arm's instruction counts give the mean."""
    mean_total = float(next(iter(tables.values())).inst_total.mean())
    return {label: t.inst_followed.to_numpy(float) / mean_total for label, t in tables.items()}


def claim_arms(
    rows: pd.DataFrame, requests: pd.DataFrame | None, resamples: int = BOOTSTRAP_RESAMPLES
):
    """(one line per arm (module doc), the MDE per metric {"prompt", "inst": mde, "n": n},
    per arm its per-prompt scores and table {label: (scores [n], table or None)}); the paired
    differences take `resamples` draws."""
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
    inst = instruction_terms(tables) if have_inst else {}
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
            # answer length against the verifier alone (the row's own columns, store/length.py)
            **{name: row.get(name) for name in LENGTH_LINE},
        }
        for metric, values in (("prompt", scores), ("inst", inst)):
            for ref, name in (("SpS", "sps"), ("verifier alone", "verifier")):
                keys = [f"{metric}_diff_{name}{end}" for end in ("", "_ci_low", "_ci_high")]
                if label in values and ref in values:
                    difference = paired_difference(values[label], values[ref], resamples)
                    line.update(zip(keys, difference, strict=True))
        table = tables[label]
        if table is not None:
            line["inst_acc"] = table.inst_followed.sum() / table.inst_total.sum()
            counts = resample_counts(n, resamples, np.random.default_rng(PAIRED_SEED))
            ratio = (counts @ table.inst_followed.to_numpy(float)) / (
                counts @ table.inst_total.to_numpy(float)
            )
            line["inst_acc_ci_low"], line["inst_acc_ci_high"] = percentile_interval(ratio)
            on_budget = (table.stop_reason == "length").to_numpy(float)  # [n]
            line["ends_on_budget"] = float(on_budget.mean())
            sps = tables["SpS"]
            if sps is not None:  # a rule that runs on longer than SpS is a finding: pair it
                keys = ("budget_diff_sps", "budget_diff_sps_ci_low", "budget_diff_sps_ci_high")
                sps_on_budget = (sps.stop_reason == "length").to_numpy(float)
                difference = paired_difference(on_budget, sps_on_budget, resamples)
                line.update(zip(keys, difference, strict=True))
            speculative = label not in ("SpS", "verifier alone") and table.steps.notna().all()
            if speculative and sps is not None:
                al_diff = paired_ratio_difference(
                    table.accepted, table.steps, sps.accepted, sps.steps, resamples
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
