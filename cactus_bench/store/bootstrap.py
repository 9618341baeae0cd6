"""The bootstrap's parts: resample counts over prompts (or waves, then prompts), ratios of sums
over each resample, and the percentile interval of the resampled values.

A resample is a [B, n] matrix of counts, how often each of n prompts is drawn in each of B
resamples, so any per-prompt sum over every resample is one matrix product (`counts @ values`).
The interval is the percentile interval: the 2.5th and 97.5th percentiles of the
BOOTSTRAP_RESAMPLES resampled values (numpy's default linear interpolation, Hyndman-Fan type 7).
The random draws come from a fixed stream derived from the run seed, so a row is reproducible.

One percentile rule for the whole project: `percentile_bounds` gives the results rows' intervals
(intervals.py) and the frontier's (frontier/aggregate.py, a bootstrap over sequences). scipy's
paired BCa bootstrap was compared with it in simulation and was not closer to 95%
(docs/statistics.md), so this one stays.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
BOOTSTRAP_STREAM = 16_003  # mixed with the run seed: the bootstrap's own random stream


def bootstrap_rng(seed: int) -> np.random.Generator:
    """The bootstrap's generator for run seed `seed` (independent of the decoding streams)."""
    return np.random.default_rng([BOOTSTRAP_STREAM, int(seed)])


def resample_counts(n_prompts: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """[resamples, n_prompts] how often each prompt is drawn in each resample (rows sum to n)."""
    drawn = rng.integers(0, n_prompts, size=(resamples, n_prompts))  # [B, n] prompt indices
    flat = (drawn + n_prompts * np.arange(resamples)[:, None]).ravel()
    counts = np.bincount(flat, minlength=resamples * n_prompts).reshape(resamples, n_prompts)
    return counts.astype(np.float64)  # exact small integers; float for BLAS products


def wave_resample_counts(
    waves: Sequence[int], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """[resamples, n_prompts] draws of each prompt when the waves are drawn with replacement and
    then, within each drawn wave, its prompts (waves[p]: prompt p's wave, ascending)."""
    waves = np.asarray(waves)
    n_prompts = len(waves)
    starts = np.searchsorted(waves, np.arange(waves.max() + 1))  # [W] first prompt of each wave
    sizes = np.bincount(waves)  # [W]
    drawn = rng.integers(0, len(sizes), size=(resamples, len(sizes)))  # [R, W] waves drawn
    member = rng.random((resamples, len(sizes), sizes.max()))  # [R, W, B] within-wave draws
    picked = starts[drawn][..., None] + (member * sizes[drawn][..., None]).astype(int)
    kept = np.arange(sizes.max()) < sizes[drawn][..., None]  # [R, W, B] a wave's own slots
    row = np.broadcast_to(np.arange(resamples)[:, None, None], picked.shape)
    flat = (picked + n_prompts * row)[kept]
    counts = np.bincount(flat, minlength=resamples * n_prompts).reshape(resamples, n_prompts)
    return counts.astype(np.float64)


def percentile_bounds(replicates, confidence: float = CONFIDENCE, axis: int = 0) -> np.ndarray:
    """[2, ...] the lower and upper percentiles of bootstrap replicates along `axis` (linear
    interpolation); NaN replicates (a statistic undefined on that resample) are left out, and a
    slice with no other value gives NaN."""
    tail = (1.0 - confidence) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN slice stays NaN
        return np.nanquantile(np.asarray(replicates, dtype=float), [tail, 1.0 - tail], axis=axis)


def percentile_interval(values: np.ndarray, confidence: float = CONFIDENCE):
    """(low, high) percentiles of the resampled values; (None, None) if any is not finite."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or not np.all(np.isfinite(values)):
        return None, None
    low, high = percentile_bounds(values, confidence)
    return float(low), float(high)


def ratio_of_sums(counts: np.ndarray, numerator, denominator) -> np.ndarray:
    """[B] sum(numerator) / sum(denominator) over each resample; NaN where the sum is 0."""
    top = counts @ np.asarray(numerator, dtype=float)
    bottom = counts @ np.asarray(denominator, dtype=float)
    return safe_ratio(top, bottom)


def safe_ratio(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """top / bottom elementwise; NaN where bottom is not positive (a statistic undefined there)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)


def per_token_summary(per_answer: list[list[float]], seed: int, resamples: int = 2000) -> dict:
    """Mean per-token value (e.g. a drafter's acceptance sum_x min(p, q)) and its 95% interval:
    a bootstrap over answers, each resample drawing answers with replacement and pooling their
    tokens (a ratio of sums)."""
    sums = np.array([sum(values) for values in per_answer])
    tokens = np.array([len(values) for values in per_answer], dtype=float)
    counts = resample_counts(len(per_answer), resamples, bootstrap_rng(seed))
    low, high = percentile_interval(ratio_of_sums(counts, sums, tokens))
    return {
        "mean": float(sums.sum() / tokens.sum()),
        "ci95": [low, high],
        "tokens": int(tokens.sum()),
        "answers": len(per_answer),
    }
