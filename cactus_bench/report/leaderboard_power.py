"""The rules board's score comparisons with SpS: the paired difference on the same prompts,
the board's power, and which task sits at the floor (cactus_bench/report/leaderboard.py).

    paired_difference([1, 1, 0], [0, 1, 0])   # (1/3, low, high): mean(arm - SpS), 95 % interval
    minimum_detectable_difference(sd=0.5, n=25)   # 0.280: (z_0.975 + z_0.8) * sd / sqrt(n)

The interval is the project's percentile bootstrap over prompts (store/bootstrap.py:
resample_counts, percentile_interval, 2,000 resamples), paired: each resample draws n prompts and
both arms' scores of a drawn prompt come along, so the prompt-to-prompt spread they share
cancels. Its draws come from numpy's default_rng(PAIRED_SEED), the same resamples for every arm.
The power is the normal approximation of a two-sided paired test at TEST_ALPHA with POWER.
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from cactus_bench.store.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    percentile_interval,
    resample_counts,
)

PAIRED_SEED = 0  # numpy default_rng(0): the paired bootstrap's resamples, the same for every arm
FLOOR_SCORE = 0.10  # a task whose SpS score has its 95 % upper end below this is at the floor
TEST_ALPHA = 0.05  # two-sided
POWER = 0.80
SIZED_DROP = 0.10  # the score drop (10 points) whose prompt count the power sentence gives


def paired_difference(
    scores, reference, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = PAIRED_SEED
) -> tuple[float, float | None, float | None]:
    """(mean(scores - reference), low, high): per-prompt scores of an arm and of the reference
    on the same prompts, and the paired percentile bootstrap's 95 % interval of the mean
    difference: each resample draws n prompts with replacement (numpy default_rng(seed)) and
    both arms' scores of a drawn prompt come along. (low, high) is (None, None) under 2
    prompts."""
    scores, reference = np.asarray(scores, dtype=float), np.asarray(reference, dtype=float)
    if scores.shape != reference.shape or scores.ndim != 1:
        raise ValueError(
            f"paired difference of {scores.shape} scores against {reference.shape}: the arms "
            "must score the same prompts"
        )
    differences = scores - reference  # [n]
    estimate = float(differences.mean())
    if differences.size < 2:
        return estimate, None, None
    counts = resample_counts(differences.size, resamples, np.random.default_rng(seed))  # [B, n]
    low, high = percentile_interval(counts @ differences / differences.size)
    return estimate, low, high


def _z_sum(alpha: float, power: float) -> float:
    normal = NormalDist()
    return normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(power)


def minimum_detectable_difference(
    sd: float, n: int, alpha: float = TEST_ALPHA, power: float = POWER
) -> float:
    """The smallest mean paired difference a two-sided test at `alpha` detects with `power`
    over n pairs whose differences have standard deviation sd (normal approximation):
    (z_{1 - alpha/2} + z_power) * sd / sqrt(n)."""
    return _z_sum(alpha, power) * sd / math.sqrt(n)


def pairs_needed(
    difference: float, sd: float, alpha: float = TEST_ALPHA, power: float = POWER
) -> int:
    """The pairs (prompts) a paired test needs to detect `difference` (the inverse of
    minimum_detectable_difference, rounded up)."""
    return math.ceil((_z_sum(alpha, power) * sd / abs(difference)) ** 2)


def pooled_sd(differences: list[np.ndarray]) -> float:
    """The root of the mean sample variance (ddof 1) of equally long per-prompt differences."""
    if not differences:
        return math.nan
    return math.sqrt(float(np.mean([np.var(d, ddof=1) for d in differences])))


def _prompt_scores(cell) -> np.ndarray | None:
    if not isinstance(cell, str) or not cell:
        return None
    scores = np.asarray([math.nan if v is None else v for v in json.loads(cell)], dtype=float)
    return None if np.isnan(scores).any() else scores


def paired_columns(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, dict]]:
    """score_diff_sps (with its interval) and score_mde per row of `rows`, and per task its
    power: {task: {n, sd, arms, mde, needed}}. A task's rows must share one prompts_hash."""
    names = ["score_diff_sps", "score_diff_sps_ci_low", "score_diff_sps_ci_high", "score_mde"]
    out = pd.DataFrame(math.nan, index=rows.index, columns=names)
    power: dict[str, dict] = {}
    for task, part in rows.groupby("task", sort=True):
        hashes = sorted(set(part.prompts_hash.dropna().astype(str)))
        if len(hashes) > 1:
            raise ValueError(
                f"rules board: task {task}'s rows scored different prompts (prompts_hash "
                f"{', '.join(hashes)}): a paired difference needs one prompt list; report "
                "them from separate CSVs"
            )
        reference = part[part.sampler == "sps"]
        if len(reference) != 1:
            continue  # no SpS row (or several): nothing to pair against
        base = _prompt_scores(reference.score_by_prompt.iloc[0])
        if base is None:
            continue
        differences = []
        for index, cell in part.score_by_prompt.items():
            scores = _prompt_scores(cell)
            if scores is None:
                continue
            if len(scores) != len(base):
                raise ValueError(
                    f"rules board: task {task} has rows scored on {len(scores)} and "
                    f"{len(base)} prompts under one prompts_hash: the CSV is inconsistent"
                )
            out.loc[index, names[:3]] = paired_difference(scores, base)
            if part.at[index, "sampler"] != "sps":
                differences.append(scores - base)
        powered = bool(differences) and len(base) >= 2  # a sd needs 2 prompts
        sd = pooled_sd(differences) if powered else math.nan
        mde = minimum_detectable_difference(sd, len(base)) if powered else math.nan
        out.loc[part.index, "score_mde"] = mde
        needed = pairs_needed(SIZED_DROP, sd) if powered and sd > 0 else None
        power[task] = {"n": len(base), "sd": sd, "arms": len(differences), "mde": mde}
        power[task]["needed"] = needed
    return out, power


def at_floor(part: pd.DataFrame) -> bool:
    """Whether a task's scores sit at the floor: SpS's score has its 95 % upper end (its score
    where it has no interval) below FLOOR_SCORE. A task without an SpS row is not."""
    reference = part[part.rule == "sps"]
    if reference.empty:
        return False
    top = reference.score_ci_high.iloc[0]
    top = reference.score.iloc[0] if pd.isna(top) else top
    return bool(top < FLOOR_SCORE)


def power_sentence(task_power: dict | None, floor: bool) -> str:
    """The board's power on one task, from paired_columns' figures."""
    if not task_power or math.isnan(task_power["mde"]):
        return "Power: no single SpS row with per-prompt scores to pair against."
    n, sd, mde = task_power["n"], task_power["sd"], task_power["mde"]
    if floor:
        return (
            f"Power: not meaningful at the floor. Most per-prompt differences are 0, so their "
            f"sd ({sd:.3f}, pooled over the task's {task_power['arms']} arms other than SpS) "
            f"and the MDE it gives at {n} prompts ({mde:.2f}, `score_mde`) describe departures "
            "from a zero score, not the rules' accuracy."
        )
    text = (
        f"Power: with {n} prompts the board detects a score difference from SpS of "
        f"{mde:.2f} ({100 * mde:.0f} points) or more with {100 * POWER:.0f} % power (two-sided "
        f"paired test at alpha = {TEST_ALPHA:g}, normal approximation; sd of the per-prompt "
        f"differences {sd:.3f}, pooled over the task's {task_power['arms']} arms other than SpS)."
    )
    if task_power["needed"] is not None:
        text += (
            f" A {100 * SIZED_DROP:.0f}-point drop would need {task_power['needed']} prompts "
            "at that sd."
        )
    return text


def excluding_zero(part: pd.DataFrame) -> str:
    """Which arms' paired interval excludes 0, in one sentence."""
    others = part[part.rule != "sps"]
    hits = others[(others.score_diff_sps_ci_low > 0) | (others.score_diff_sps_ci_high < 0)]
    if hits.empty:
        return f"No arm's paired interval excludes 0 (of {len(others)} against SpS)."
    return (
        f"{len(hits)} of {len(others)} arms' paired intervals exclude 0: {', '.join(hits.label)}."
    )
