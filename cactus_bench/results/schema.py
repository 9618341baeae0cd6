"""The results CSV schema: one row per (run, task), one column per field, the source of truth.

Every column has a kind that fixes how a Python value becomes a cell and how a cell is read back.
A missing value is an EMPTY cell, never 0: a verifier-only run has no AL, an errored run has no
timings. `row_to_cells` is the only way a row reaches disk, so a typo in a column name, a NaN
disguised as a number or an error row carrying stale timings (a pitfall Spec-Bench hit) fails
loudly before anything is written. docs/results-schema.md is generated from this file
(`python -m cactus_bench.results.schema_doc`); a test keeps the two equal.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cactus_bench.run_settings import COLUMN_SETTINGS, GROUPED_COLUMNS, PARAM_COLUMNS

STATUSES = ("ok", "error")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "str" | "int" | "float" | "bool" | "json"
    doc: str


# Each rule parameter's own column (PARAM_COLUMNS of the catalogue); one column may serve several
# rules (alpha: TAS, interp, a cascade), so its doc names them all.
_PARAM_COLUMNS: tuple[Column, ...] = (
    Column("delta", "float", "divergence budget (cactus, cactus_exact, mentored)"),
    Column("divergence", "str", "f-divergence of the constraint, e.g. kl"),
    Column("threshold", "float", "TAS posterior threshold epsilon, FSD's T, or FLy's theta"),
    Column("alpha", "float", "TAS alpha, interp's drafter weight, a cascade's alpha"),
    Column("top_k_accept", "int", "k of the top-k acceptance baseline"),
    Column("lenience_l", "float", "Leviathan's lenience l (lenience; 1 = SpS)"),
    Column("tau", "float", "BiLD's rollback threshold tau_RB in nats (bild)"),
    Column("fsd_div", "str", "FSD's divergence: js | kl | reverse_kl | tv"),
    Column("test_law", "str", "unscaled | processed: law a cascade/FSD/BiLD test reads"),
    Column("w", "float", "ensemble weight on q (runs as interp, alpha = 1 - w)"),
    Column("fly_window", "int", "FLy's deferred window W (fly)"),
)

_SCHEMA: tuple[Column, ...] = (
    # identity and provenance
    Column("run_id", "str", "unique id of the run (one run may write one row per task)"),
    Column("config_hash", "str", "config_hash() of the result-relevant config; resume key"),
    Column("timestamp", "str", "ISO 8601 UTC time the row was produced"),
    Column("git_sha", "str", "commit of the harness (recorded at submission for Slurm)"),
    Column("git_dirty", "bool", "true when the work tree had uncommitted changes"),
    # what was run: the run settings' columns (cactus_bench.run_settings), the rule parameters'
    # columns (samplers/catalogue.py) after `sampler`
    *(
        column
        for setting in COLUMN_SETTINGS
        for column in (
            Column(setting.csv_column, setting.column_kind, setting.doc),
            *(_PARAM_COLUMNS if setting.name == "sampler" else ()),
        )
    ),
    Column("n_prompts", "int", "number of prompts scored (each decoded `repeats` times)"),
    # quality
    Column("score_name", "str", "which task metric `score` is, e.g. exact_match,strict-match"),
    Column("score", "float", "headline task score as a fraction in [0, 1]"),
    Column(
        "score_ci_low",
        "float",
        "lower end of the 95% interval of score: percentile bootstrap over prompts, paired "
        "with the baseline, 2000 resamples (results/intervals.py)",
    ),
    Column("score_ci_high", "float", "upper end of the 95% interval of score"),
    Column("metrics_json", "json", "every task metric, a JSON object name -> value"),
    Column(
        "score_by_prompt",
        "json",
        "list: the headline metric per prompt in document order, averaged over repeats",
    ),
    Column(
        "prompts_hash",
        "str",
        "hash of the prompts' token ids in order: rows with equal hashes ran the same prompts",
    ),
    # speculation statistics (empty for a verifier-only run)
    Column("al", "float", "accepted drafts per verification step, bonus NOT counted (paper's AL)"),
    Column("al_ci_low", "float", "lower end of the 95% interval of al"),
    Column("al_ci_high", "float", "upper end of the 95% interval of al"),
    Column("tokens_per_step", "float", "emitted tokens per step, bonus counted (vLLM's 'AL')"),
    Column("tokens_per_step_ci_low", "float", "lower end of the 95% interval of tokens_per_step"),
    Column("tokens_per_step_ci_high", "float", "upper end of the 95% interval of tokens_per_step"),
    Column("accept_rate", "float", "accepted drafts / drafted tokens"),
    Column(
        "accept_rate_by_pos",
        "json",
        "list: fraction of steps whose draft position j was "
        "accepted, among steps that drafted position j (sums to AL when every step drafts m)",
    ),
    Column(
        "accept_rate_by_pos_ci_low",
        "json",
        "list: lower ends of the 95% intervals of accept_rate_by_pos, one per position (null "
        "where undefined), from the same bootstrap resamples as the other intervals",
    ),
    Column(
        "accept_rate_by_pos_ci_high",
        "json",
        "list: upper ends of the 95% intervals of accept_rate_by_pos (null where undefined)",
    ),
    Column("draft_tokens_drafted", "int", "draft tokens proposed, all steps and prompts"),
    Column("draft_tokens_accepted", "int", "draft tokens accepted"),
    Column("draft_tokens_rejected", "int", "drafted - accepted, incl. drafts after a rejection"),
    Column("generated_tokens", "int", "output tokens after stop handling, all prompts"),
    Column("num_steps", "int", "verification steps (autoregressive: one per token)"),
    Column(
        "draft_probs_fallbacks",
        "int",
        "verification steps vLLM's own exact sampler decided because vLLM passed no draft "
        "probabilities (near max_model_len): the rule did not run there (backend=vllm; empty on "
        "hf, which always has them)",
    ),
    # timing
    Column("prefill_time_s", "float", "seconds of both models' prompt passes, summed"),
    Column("draft_time_s", "float", "seconds spent drafting, summed over prompts"),
    Column("verify_time_s", "float", "seconds spent in verifier forwards"),
    Column("sampler_time_s", "float", "seconds spent in the acceptance rule"),
    Column(
        "wall_time_spec_s",
        "float",
        "decode seconds of this run's decoder: summed per request at batch 1, the batched run's "
        "wall time at batch > 1 (each request's share of it)",
    ),
    Column("wall_time_baseline_s", "float", "total decode seconds of the verifier-only baseline"),
    Column("baseline_generated_tokens", "int", "output tokens of the baseline, all prompts"),
    Column(
        "tokens_per_s_spec",
        "float",
        "generated_tokens / wall_time_spec_s: the run's throughput (at batch > 1 too)",
    ),
    Column(
        "tokens_per_s_spec_ci_low", "float", "lower end of the 95% interval of tokens_per_s_spec"
    ),
    Column(
        "tokens_per_s_spec_ci_high", "float", "upper end of the 95% interval of tokens_per_s_spec"
    ),
    Column("tokens_per_s_baseline", "float", "baseline_generated_tokens / wall_time_baseline_s"),
    Column(
        "speedup_tokens",
        "float",
        "tokens_per_s_spec / tokens_per_s_baseline: the speedup in tokens/s, robust to the arms "
        "emitting answers of different lengths",
    ),
    Column("speedup_tokens_ci_low", "float", "lower end of the 95% interval of speedup_tokens"),
    Column("speedup_tokens_ci_high", "float", "upper end of the 95% interval of speedup_tokens"),
    Column("speedup_walltime", "float", "wall_time_baseline_s / wall_time_spec_s (the paper's)"),
    Column("speedup_walltime_ci_low", "float", "lower end of the 95% interval of speedup_walltime"),
    Column(
        "speedup_walltime_ci_high", "float", "upper end of the 95% interval of speedup_walltime"
    ),
    Column(
        "tpot_median_s",
        "float",
        "median over requests of a request's wall time per output token (neighbours' work "
        "included at batch > 1): the latency a served user sees",
    ),
    Column("tpot_median_s_ci_low", "float", "lower end of the 95% interval of tpot_median_s"),
    Column("tpot_median_s_ci_high", "float", "upper end of the 95% interval of tpot_median_s"),
    Column("tpot_p90_s", "float", "90th percentile over requests of the time per output token"),
    Column("tpot_p90_s_ci_low", "float", "lower end of the 95% interval of tpot_p90_s"),
    Column("tpot_p90_s_ci_high", "float", "upper end of the 95% interval of tpot_p90_s"),
    # waves, drift and the machine's state (results/drift.py, results/machine.py); empty in
    # rows written before they existed
    Column(
        "waves",
        "int",
        "waves each arm decoded: `batch` requests per wave, the arms alternating which goes "
        "first (at batch 1 a wave is one request)",
    ),
    Column(
        "spec_drift",
        "float",
        "the run's step rate over the second half of its waves / the first half's, minus 1: a "
        "change of machine speed during the run (empty with < 2 waves)",
    ),
    Column(
        "baseline_drift",
        "float",
        "the same for the verifier-only baseline (a cached one: during its own decode)",
    ),
    Column(
        "drift_marked",
        "bool",
        "true when spec_drift or baseline_drift exceeds drift_threshold in size: the machine's "
        "speed moved during the run, so its timings are suspect",
    ),
    Column("load_spec_start", "float", "1-minute load average when the run's arm began"),
    Column("load_spec_end", "float", "1-minute load average when the run's arm ended"),
    Column(
        "load_baseline_start",
        "float",
        "1-minute load average when the baseline began (a cached one: when it was decoded)",
    ),
    Column("load_baseline_end", "float", "1-minute load average when the baseline ended"),
    Column(
        "machine_state_json",
        "json",
        "each arm's {start, end} {time, load}; on CUDA the GPU's SM clock and other processes' "
        "GPU memory where pynvml or nvidia-smi show them; a cached baseline's machine",
    ),
    Column(
        "baseline_age_s",
        "float",
        "baseline=cached: seconds from the cached baseline's end to this run's start",
    ),
    Column(
        "baseline_load_gap",
        "float",
        "baseline=cached: load at this run's start minus the load when the baseline began",
    ),
    Column(
        "ci_resamples",
        "int",
        "bootstrap resamples behind the *_ci_* columns; empty when there are none (1 prompt)",
    ),
    # environment
    Column("device_name", "str", "accelerator or CPU model the timings come from"),
    Column("torch_version", "str", "torch version"),
    Column("transformers_version", "str", "transformers version"),
    Column("python_version", "str", "Python version"),
    # outcome
    Column("status", "str", "ok | error"),
    Column("error", "str", "one-line error message when status is error"),
)

SCHEMA: dict[str, Column] = {c.name: c for c in _SCHEMA}

# Columns renamed since CSVs were first written, old name -> current name. Every reader renames
# them (ResultStore, the report, the W&B mirror), so older CSVs still resume and report.
RENAMED_COLUMNS: dict[str, str] = {
    "n_samples": "n_prompts",  # it always counted prompts, not decoded samples
    "speedup": "speedup_tokens",  # easy to mistake for the paper's speedup_walltime
    "speedup_ci_low": "speedup_tokens_ci_low",
    "speedup_ci_high": "speedup_tokens_ci_high",
}
COLUMNS: list[str] = [c.name for c in _SCHEMA]
REQUIRED_COLUMNS: tuple[str, ...] = ("run_id", "config_hash", "task", "sampler", "status")
# One report cell / plotted point per distinct combination of these (seeds are averaged): the
# run settings' grouped columns (cactus_bench.run_settings), in the schema's order.
CONFIG_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c in GROUPED_COLUMNS)

# Measured numbers: an error row must leave these empty so a failed run never carries stale values.
MEASUREMENT_COLUMNS: tuple[str, ...] = tuple(
    COLUMNS[COLUMNS.index("score") : COLUMNS.index("ci_resamples") + 1]
)
if {c.name for c in _PARAM_COLUMNS} != set(PARAM_COLUMNS):
    raise AssertionError("results/schema.py's parameter columns differ from the catalogue's")


def _is_missing(value) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return value == ""
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return math.isnan(float(value))
    return value is pd.NA or value is pd.NaT


def format_cell(name: str, value) -> str:
    """One cell's text for column `name`; raises ValueError when the value does not fit."""
    column = SCHEMA[name]
    if _is_missing(value):
        return ""
    kind = column.kind
    if kind == "str":
        text = str(value)
        if "\n" in text or "\r" in text:
            # A newline would survive CSV quoting but breaks grep/tail-style inspection and the
            # single-line error contract; flatten it.
            text = " ".join(text.split())
        return text
    if kind == "bool":
        if isinstance(value, (bool, np.bool_)):
            return "true" if bool(value) else "false"
        raise ValueError(f"column {name!r} wants a bool, got {value!r}")
    if kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError(f"column {name!r} wants an integer, got {value!r}")
        if float(value) != int(value):
            raise ValueError(f"column {name!r} wants an integer, got non-integral {value!r}")
        return str(int(value))
    if kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            raise ValueError(f"column {name!r} wants a number, got {value!r}")
        if math.isinf(float(value)):
            raise ValueError(
                f"column {name!r} got {value!r}; store a finite number or leave it empty (None)"
            )
        return repr(float(value))
    if kind == "json":
        if isinstance(value, str):
            json.loads(value)  # must already be valid JSON
            return value
        return json.dumps(_json_safe(value), separators=(",", ":"), sort_keys=True, allow_nan=False)
    raise AssertionError(f"unknown column kind {kind!r}")


def _json_safe(value):
    """NaN inside a JSON list/dict becomes null (JSON has no NaN); numpy scalars become Python."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def row_to_cells(row: dict, columns: list[str] | None = None) -> list[str]:
    """Validate `row` and return its cells in `columns` order (default COLUMNS).

    Unknown keys are an error (add the column to schema.py); keys in `columns` but not in the
    schema (written by a newer version of the harness) are left empty.
    """
    unknown = sorted(set(row) - set(SCHEMA))
    if unknown:
        raise ValueError(
            f"unknown result column(s) {unknown}; known columns are "
            "cactus_bench.results.COLUMNS (add new ones in results/schema.py)"
        )
    for name in REQUIRED_COLUMNS:
        if _is_missing(row.get(name)):
            raise ValueError(f"result row is missing required column {name!r}")
    status = row["status"]
    if status not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
    if status == "error":
        if _is_missing(row.get("error")):
            raise ValueError("an error row needs a one-line message in column 'error'")
        stale = [c for c in MEASUREMENT_COLUMNS if not _is_missing(row.get(c))]
        if stale:
            raise ValueError(
                f"an error row must leave measured columns empty, got {stale}: "
                "a failed run must not carry stale numbers"
            )
    score = row.get("score")
    if not _is_missing(score) and isinstance(score, numbers.Real) and not 0 <= score <= 1:
        raise ValueError(
            f"score must be a fraction in [0, 1] (as lm-eval reports it), got "
            f"{score!r}; the report shows it as a percentage"
        )
    for low_name in (name for name in row if name.endswith("_ci_low")):
        low, high = row[low_name], row.get(low_name[: -len("low")] + "high")
        if _is_missing(low) or _is_missing(high):
            continue
        if SCHEMA[low_name].kind == "json":  # per-position lists: end by end
            low, high = (json.loads(v) if isinstance(v, str) else list(v) for v in (low, high))
            if len(low) != len(high):
                raise ValueError(f"{low_name} has {len(low)} entries but its upper end {len(high)}")
        pairs = zip(low, high, strict=True) if isinstance(low, list) else [(low, high)]
        if any(not _is_missing(a) and not _is_missing(b) and a > b for a, b in pairs):
            raise ValueError(f"{low_name} = {low!r} is above its upper end {high!r}")
    cells = {name: format_cell(name, value) for name, value in row.items()}
    return [cells.get(name, "") for name in (columns or COLUMNS)]


def coerce_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Give the columns of a CSV read as text their schema types (missing -> NA, never 0).

    Columns an older harness wrote under another name get their current one first."""
    frame = frame.rename(columns=RENAMED_COLUMNS)
    for name in frame.columns:
        column = SCHEMA.get(name)
        text = frame[name].astype("string").replace("", pd.NA)
        if column is None or column.kind in ("str", "json"):
            frame[name] = text
        elif column.kind == "float":
            frame[name] = pd.to_numeric(text, errors="raise").astype("Float64")
        elif column.kind == "int":
            frame[name] = pd.to_numeric(text, errors="raise").astype("Int64")
        elif column.kind == "bool":
            lowered = text.str.lower()
            bad = lowered.dropna()[~lowered.dropna().isin(["true", "false"])]
            if len(bad):
                raise ValueError(f"column {name!r} holds non-boolean values {list(bad[:3])}")
            frame[name] = lowered.map({"true": True, "false": False}).astype("boolean")
    return frame
