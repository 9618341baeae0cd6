"""Paired tests of score differences between two rows run on the same prompts, and Holm's method.

Both tests are two-sided and use only the per-prompt scores (`score_by_prompt`):

- McNemar's exact test when every per-prompt score of both rows is 0 or 1 (GSM8K, GPQA, IFEval's
  prompt level, one decode per prompt): only the discordant prompts carry information; under
  "no difference" each is equally likely to favour either row, so the count b of prompts only
  the first row got right is Binomial(b + c, 1/2) and p = min(1, 2 P(X <= min(b, c))).
- A paired sign-flip permutation test otherwise (fractional scores: repeats > 1, cells that
  average seeds, instruction-level metrics): under "no difference" each per-prompt difference
  d_i is as likely to be +d_i as -d_i, so p is the share of the 2^k sign patterns (k prompts
  with d_i != 0; exactly when k <= EXACT_FLIPS, else PERMUTATIONS random patterns with a fixed
  seed, p = (1 + hits) / (1 + PERMUTATIONS)) whose |sum| reaches the observed |sum(d)|. On 0/1
  scores it gives McNemar's p exactly (tests/test_report_intervals.py checks this).

Holm's step-down method controls the family-wise error rate over a table's comparisons.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

ALPHA = 0.05
EXACT_FLIPS = 16  # 2^16 sign patterns at most are enumerated
PERMUTATIONS = 20_000
PERMUTATION_SEED = 0
MCNEMAR = "McNemar's exact test"
SIGN_FLIP = "paired sign-flip permutation test"


def binomial_tail(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exact (integer arithmetic, then one division)."""
    if n == 0:
        return 1.0
    return math.fsum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


def mcnemar_exact(first: Sequence[float], second: Sequence[float]) -> float:
    """Two-sided exact McNemar p-value for paired 0/1 outcomes."""
    a, b = _paired(first, second)
    if not np.all(np.isin(a, (0.0, 1.0))) or not np.all(np.isin(b, (0.0, 1.0))):
        raise ValueError("McNemar's test needs 0/1 scores; use sign_flip_test for fractions")
    only_first = int(np.sum((a == 1) & (b == 0)))
    only_second = int(np.sum((a == 0) & (b == 1)))
    n = only_first + only_second
    return min(1.0, 2.0 * binomial_tail(min(only_first, only_second), n))


def sign_flip_test(first: Sequence[float], second: Sequence[float]) -> float:
    """Two-sided paired permutation p-value of the mean difference (random signs per prompt)."""
    a, b = _paired(first, second)
    diffs = a - b
    diffs = diffs[np.abs(diffs) > 1e-12]  # [k] prompts that differ
    if diffs.size == 0:
        return 1.0
    observed = abs(diffs.sum())
    tolerance = 1e-9 * max(1.0, observed)
    if diffs.size <= EXACT_FLIPS:
        patterns = np.arange(2**diffs.size)[:, None] >> np.arange(diffs.size) & 1  # [2^k, k]
        sums = np.abs((1 - 2 * patterns) @ diffs)
        return float(np.mean(sums >= observed - tolerance))
    rng = np.random.default_rng(PERMUTATION_SEED)
    signs = rng.choice((-1.0, 1.0), size=(PERMUTATIONS, diffs.size))  # [P, k]
    hits = int(np.sum(np.abs(signs @ diffs) >= observed - tolerance))
    return (1 + hits) / (1 + PERMUTATIONS)


def paired_score_test(first: Sequence[float], second: Sequence[float]) -> tuple[float, str]:
    """(p, test name): McNemar's exact test for 0/1 scores, else the sign-flip test."""
    a, b = _paired(first, second)
    if np.all(np.isin(a, (0.0, 1.0))) and np.all(np.isin(b, (0.0, 1.0))):
        return mcnemar_exact(a, b), MCNEMAR
    return sign_flip_test(a, b), SIGN_FLIP


def holm(pvalues: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down rejections: the i-th smallest p (from 0) must be <= alpha / (N - i)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    rejected = [False] * len(pvalues)
    for rank, index in enumerate(order):
        if pvalues[index] > alpha / (len(pvalues) - rank):
            break
        rejected[index] = True
    return rejected


SPS_MARK = "†"  # the score differs significantly from SpS's
VERIFIER_MARK = "‡"  # ... from the verifier's
REFERENCES = (("SpS", SPS_MARK), ("Verifier", VERIFIER_MARK))


def score_marks(by_method: dict, alpha: float = ALPHA) -> tuple[dict, list[str], int]:
    """Marks for a table's score cells: {(method label, task): "†‡"}, the tests used, and the
    number of comparisons (the Holm family).

    by_method: {method label: {task: row}} with the labels of tables.method_label ("SpS",
    "Verifier", ...). Every method is compared with SpS and with the verifier on each task where
    both rows have per-prompt scores of the same prompts; SpS with the verifier only.
    """
    comparisons = []  # (label, task, mark, p, test)
    for label, cells in by_method.items():
        for task, row in cells.items():
            for reference, mark in REFERENCES:
                other = by_method.get(reference, {}).get(task)
                if label in (reference, "Verifier") or other is None:
                    continue
                if same_prompts(row, other):
                    p, test = paired_score_test(per_prompt_scores(row), per_prompt_scores(other))
                    comparisons.append((label, task, mark, p, test))
    rejected = holm([c[3] for c in comparisons], alpha)
    marks: dict[tuple[str, str], str] = {}
    for (label, task, mark, _, _), significant in zip(comparisons, rejected, strict=True):
        if significant:
            marks[(label, task)] = marks.get((label, task), "") + mark
    return marks, sorted({c[4] for c in comparisons}), len(comparisons)


def per_prompt_scores(row) -> np.ndarray | None:
    """A row's per-prompt scores, or None when the CSV has none (older rows)."""
    cell = row.get("score_by_prompt")
    if not isinstance(cell, str):  # NA: a row written before the column existed
        return None
    values = json.loads(cell)
    if not values or any(v is None for v in values):
        return None
    return np.asarray(values, dtype=float)


def same_prompts(row, other) -> bool:
    """True when both rows carry per-prompt scores of the same prompts (hash and count)."""
    a, b = per_prompt_scores(row), per_prompt_scores(other)
    if a is None or b is None or a.size != b.size:
        return False
    hashes = [r.get("prompts_hash") for r in (row, other)]
    return not any(isinstance(h, str) for h in hashes) or hashes[0] == hashes[1]


def _paired(first: Sequence[float], second: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"paired tests need two per-prompt lists of one length, got {a.shape} and {b.shape}"
        )
    return a, b
