"""Load results CSVs for the report: check columns, type them, keep finished rows, average seeds.

The report reads CSV files only (never a model, never the engine), so it runs anywhere the CSVs
are, e.g. on a laptop after copying results/ from the cluster. Columns added after a CSV was
written (the intervals, the per-prompt scores) read as empty, and renamed columns
(schema.RENAMED_COLUMNS) get their current names, so older CSVs still report.

Intervals of a cell that averages several seeds: the score's is recomputed by the same bootstrap
from the seed-averaged per-prompt scores (the seeds act as repeats); the others are the means of
the per-seed bounds, which errs wide (the seeds share the prompt-to-prompt spread, and averaging
only shrinks the decoding noise), except the per-position acceptance intervals: a cell of several
runs has none (see aggregate).
"""

from __future__ import annotations

import glob
import io
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from cactus_bench.store.bootstrap import (
    BOOTSTRAP_RESAMPLES,
    bootstrap_rng,
    percentile_interval,
    resample_counts,
)
from cactus_bench.store.intervals import POSITION_INTERVAL_COLUMNS, interval_column_names
from cactus_bench.store.schema import CONFIG_COLUMNS, RENAMED_COLUMNS, coerce_frame

# Columns every report needs; a CSV without one was not written by ResultStore (or is truncated).
REPORT_COLUMNS = (
    "model_pair",
    "drafter_id",
    "verifier_id",
    "task",
    "sampler",
    "delta",
    "threshold",
    "alpha",
    "top_k_accept",
    "m",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "score_name",
    "score",
    "al",
    "tokens_per_step",
    "accept_rate",
    "accept_rate_by_pos",
    "draft_tokens_rejected",
    "generated_tokens",
    "tokens_per_s_spec",
    "tokens_per_s_baseline",
    "speedup_tokens",
    "speedup_walltime",
    "baseline_mode",
    "device_name",
    "status",
)

# One table cell / plotted point per distinct value of these (the schema's configuration
# columns; the ones an older CSV lacks are skipped); seeds are averaged.
CONFIG_KEYS = CONFIG_COLUMNS
# answer length against the row's baseline (store/length.py), shown beside every speedup
LENGTH_MEANS = ("length_ratio", "cap_out_share", "cap_out_diff", "mean_answer_tokens")
LENGTH_INTERVALS = tuple(
    f"{name}_ci_{end}" for name in ("length_ratio", "cap_out_diff") for end in ("low", "high")
)
_MEAN_COLUMNS = (
    "score",
    "al",
    "tokens_per_step",
    "accept_rate",
    "tokens_per_s_spec",
    "tokens_per_s_baseline",
    "speedup_tokens",
    "speedup_walltime",
    "tpot_median_s",
    "tpot_p90_s",
    *LENGTH_MEANS,
)
_SUM_COLUMNS = ("draft_tokens_rejected", "generated_tokens", "n_prompts")
INTERVAL_COLUMNS = tuple(interval_column_names())
# Newer columns a CSV may lack; they read as empty cells.
OPTIONAL_COLUMNS = (
    *INTERVAL_COLUMNS,
    *LENGTH_MEANS,
    *LENGTH_INTERVALS,
    *POSITION_INTERVAL_COLUMNS,
    "score_by_prompt",
    "prompts_hash",
    "repeats",
    "batch",
    "tpot_median_s",
    "tpot_p90_s",
    "drift_marked",
)


def device_names(rows: pd.DataFrame) -> str:
    """The machines `rows` ran on, for a title or a page: "A / B", or "device unknown"."""
    return " / ".join(sorted(set(rows["device_name"].dropna().astype(str)))) or "device unknown"


def normalise_device_name(name):
    """A row's device name as today's runs write it: rows written before store/metadata.py
    said "1 torch thread" read "(2 cores, 1 torch threads)"; other values pass through."""
    if not isinstance(name, str):
        return name
    return re.sub(r"(?<![\d.])1 torch threads\b", "1 torch thread", name)


def expand_paths(patterns: list[str | Path]) -> list[Path]:
    """Expand glob patterns (quoted so make and the shell pass them through) to files."""
    paths: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(pattern))) if glob.has_magic(str(pattern)) else [pattern]
        for match in matches:
            path = Path(match)
            if not path.is_file():
                raise ValueError(
                    f"results CSV {path} does not exist; run `python run.py` "
                    "first or pass the right --csv"
                )
            if path not in paths:
                paths.append(path)
    if not paths:
        raise ValueError(
            f"no results CSV matched {[str(p) for p in patterns]}; run "
            "`python run.py` first or pass --csv PATH"
        )
    return paths


def read_results_csv(path: str | Path) -> pd.DataFrame:
    """One results CSV, typed by the schema, with a `source_file` column."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise ValueError(
            f"{path} is empty: no header and no rows (did the run crash before its first append?)"
        )
    if not text.endswith("\n"):
        warnings.warn(f"{path}: ignoring a torn last line", stacklevel=2)
        text = text[: text.rfind("\n") + 1]
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    frame = frame.rename(columns=RENAMED_COLUMNS)  # an older CSV's names (n_samples, speedup)
    missing = [c for c in REPORT_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path} lacks column(s) {missing} that the report needs; was it "
            "written by cactus_bench.store.ResultStore?"
        )
    if frame.empty:
        raise ValueError(f"{path} has a header but no rows; nothing to report")
    for name in OPTIONAL_COLUMNS:
        if name not in frame.columns:
            frame[name] = ""
    frame = coerce_frame(frame)
    frame["device_name"] = frame["device_name"].map(normalise_device_name).astype("string")
    frame["source_file"] = str(path)
    return frame


def load_results(patterns: list[str | Path], only_ok: bool = True) -> pd.DataFrame:
    """All rows of the matching CSVs (status ok only, by default)."""
    frame = pd.concat([read_results_csv(p) for p in expand_paths(patterns)], ignore_index=True)
    if only_ok:
        frame = frame[frame["status"] == "ok"].reset_index(drop=True)
        if frame.empty:
            raise ValueError("the results CSVs hold no row with status ok; nothing to report")
    return frame


def _mean_list(cells: pd.Series) -> str | None:
    """Element-wise mean of JSON lists (per-position acceptance) over seeds; None if none."""
    lists = [json.loads(c) for c in cells.dropna()]
    if not lists:
        return None
    width = max(len(values) for values in lists)
    padded = np.full((len(lists), width), np.nan)
    for row, values in enumerate(lists):
        padded[row, : len(values)] = [np.nan if v is None else v for v in values]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN position stays NaN
        return json.dumps([None if np.isnan(v) else float(v) for v in np.nanmean(padded, 0)])


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: means over seeds (rejections and tokens summed), n_runs."""
    keys = [k for k in CONFIG_KEYS if k in frame.columns]
    _check_seeds_are_repeats(frame, keys)
    groups = frame.groupby(keys, dropna=False, sort=False)
    out = groups[list(_MEAN_COLUMNS)].mean()
    for name in _SUM_COLUMNS:
        if name in frame.columns:
            out[name] = groups[name].sum(min_count=1)
    out["accept_rate_by_pos"] = groups["accept_rate_by_pos"].agg(_mean_list)
    for name in ("drafter_id", "verifier_id", "score_name", "baseline_mode"):
        out[name] = groups[name].agg(lambda s: s.dropna().iloc[0] if s.notna().any() else None)
    out["device_name"] = groups["device_name"].agg(
        lambda s: " / ".join(sorted(set(s.dropna()))) or None
    )
    out["n_runs"] = groups.size()
    # a cell is marked when any of its runs is: the machine's speed moved during that one
    out["drift_marked"] = groups["drift_marked"].agg(lambda s: bool(s.fillna(False).any()))
    for name in (*INTERVAL_COLUMNS, *LENGTH_INTERVALS):  # one run: its bounds; several: the
        # mean, only if all have one
        out[name] = groups[name].agg(lambda s: s.mean() if s.notna().all() else None)
    # Per-position intervals: a cell of one run keeps its own; a cell of several runs shows none.
    # Its rates are per-position means over the runs (_mean_list), but the per-prompt counts a
    # bootstrap of that mean needs are not in the CSV, and a mean of bounds (as above) would mix
    # runs whose lists are null at different positions: no bars rather than made-up ones.
    for name in POSITION_INTERVAL_COLUMNS:
        out[name] = groups[name].agg(lambda s: s.iloc[0] if len(s) == 1 else None)
    out["repeats"] = groups["repeats"].agg(lambda s: s.sum() if s.notna().all() else None)
    out["prompts_hash"] = groups["prompts_hash"].agg(
        lambda s: s.iloc[0] if s.notna().all() and s.nunique() == 1 else None
    )
    out["score_by_prompt"] = groups["score_by_prompt"].agg(_mean_scores)
    out.loc[out["prompts_hash"].isna(), "score_by_prompt"] = None  # other prompts: no pairing
    out = out.reset_index()
    for index in out.index[out["n_runs"] > 1]:  # seeds act as repeats of the same prompts
        low, high = _score_interval(out.at[index, "score_by_prompt"])
        out.at[index, "score_ci_low"], out.at[index, "score_ci_high"] = low, high
    return out


def _check_seeds_are_repeats(frame: pd.DataFrame, keys: list[str]) -> None:
    """Rows that share the table's settings are averaged as repeats over seeds; two rows with the
    same settings and seed but different config hashes were measured under something the tables
    do not show (another dtype, backend, engine option or drafter version) and must not be."""
    if not {"seed", "config_hash"} <= set(frame.columns):
        return
    hashes = frame.groupby([*keys, "seed"], dropna=False)["config_hash"].nunique()
    if (hashes > 1).any():
        clash = frame.set_index([*keys, "seed"]).loc[hashes[hashes > 1].index[0]]
        files = sorted(set(clash["source_file"])) if "source_file" in clash else []
        raise ValueError(
            f"rows {sorted(set(clash['config_hash']))} ({', '.join(files)}) share sampler, "
            "settings and seed but not their config hash (another dtype, backend, engine or "
            "drafter): report them from separate CSVs, or move the outdated rows aside"
        )


def _mean_scores(cells: pd.Series) -> str | None:
    """Per-prompt scores averaged over seeds (JSON), when every seed has them for n prompts."""
    if cells.isna().any():
        return None
    lists = [json.loads(c) for c in cells]
    if len({len(values) for values in lists}) != 1 or any(None in values for values in lists):
        return None
    mean = np.mean(np.asarray(lists, dtype=float), axis=0)  # [n prompts]
    return json.dumps([round(float(v), 6) for v in mean], separators=(",", ":"))


def _score_interval(cell) -> tuple[float | None, float | None]:
    """The score's bootstrap interval from per-prompt scores (store/bootstrap.py's resampling)."""
    if not isinstance(cell, str):
        return None, None
    scores = np.asarray(json.loads(cell), dtype=float)  # [n prompts]
    if scores.size < 2:
        return None, None
    counts = resample_counts(scores.size, BOOTSTRAP_RESAMPLES, bootstrap_rng(0))
    return percentile_interval(counts @ scores / scores.size)
