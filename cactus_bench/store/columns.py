"""What a results row holds: every column of the CSV, in order, with its kind and one line of doc.

One row per (run, task). A column's kind fixes how a Python value becomes a cell and how a cell
is read back (schema.py). The configuration columns come from the run settings table, the rule
parameters' own columns from the samplers' catalogue (both through `cactus_bench.run_settings`),
the measured columns are listed here. docs/results-schema.md is generated from this file
(`python -m cactus_bench.store.schema_doc`); a test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from cactus_bench.run_settings import COLUMN_SETTINGS, GROUPED_COLUMNS, PARAM_COLUMN_SPECS

STATUSES = ("ok", "error")


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "str" | "int" | "float" | "bool" | "json"
    doc: str


# Each rule parameter's own column, in the catalogue's order (samplers/catalogue.py's
# PARAM_COLUMN_DOCS); one column may serve several rules (alpha: TAS, interp, a cascade).
_PARAM_COLUMNS: tuple[Column, ...] = tuple(Column(*spec) for spec in PARAM_COLUMN_SPECS)

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
        "with the baseline, 2000 resamples (store/intervals.py)",
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
    Column(
        "rule_drafted",
        "int",
        "drafts the rule's bridge verified inside vLLM's workers, beside vLLM's own count "
        "(draft_tokens_drafted); a run where they differ is refused (backend=vllm with a rule)",
    ),
    Column("rule_accepted", "int", "drafts the rule's bridge accepted (backend=vllm with a rule)"),
    Column(
        "vllm_version",
        "str",
        "the vLLM release and line that ran, after its start-up conformance check (backend=vllm)",
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
    # answer length against the row's own baseline, paired per prompt (store/length.py); empty
    # in rows written before they existed, unless rebuilt from a per-prompt table
    Column("mean_answer_tokens", "float", "generated tokens per answer, the run's mean"),
    Column("baseline_mean_answer_tokens", "float", "the same for the verifier-only baseline"),
    Column(
        "length_ratio",
        "float",
        "λ = generated_tokens / baseline_generated_tokens on the same prompts: above 1, the "
        "rule's answers are longer, so the user waits longer than tokens/s suggests",
    ),
    Column("length_ratio_ci_low", "float", "lower end of the 95% interval of length_ratio"),
    Column("length_ratio_ci_high", "float", "upper end of the 95% interval of length_ratio"),
    Column(
        "cap_out_share",
        "float",
        "share of answers that ended on the token budget (stop_reason length), not by stopping",
    ),
    Column("baseline_cap_out_share", "float", "the same for the verifier-only baseline"),
    Column(
        "cap_out_diff",
        "float",
        "cap_out_share - baseline_cap_out_share, paired per prompt (a fraction, not points)",
    ),
    Column("cap_out_diff_ci_low", "float", "lower end of the 95% interval of cap_out_diff"),
    Column("cap_out_diff_ci_high", "float", "upper end of the 95% interval of cap_out_diff"),
    # per-request diagnostics of the run's own requests (store/length.py); empty where the
    # records lack them (verifier-only and vLLM runs: out-of-head, acceptance)
    Column(
        "out_of_head_per_1k",
        "float",
        "accepted drafts x with q(x) < c max q per 1,000 generated tokens, c: out_of_head_c "
        "(engine/commit_stats.py; q: the verifier's sampling law), counted on the device",
    ),
    Column(
        "request_accept_rate_p10",
        "float",
        "10th percentile over requests of a request's accepted / drafted tokens",
    ),
    Column("request_accept_rate_p90", "float", "90th percentile of the same"),
    Column(
        "repeat_share",
        "float",
        "mean over answers of the share of an answer's 4-grams that occurred earlier in it",
    ),
    Column(
        "loop_share",
        "float",
        "share of answers whose last tokens are one block of <= 64 tokens repeated >= 3 times "
        "over >= 24 tokens (engine/record.py ends_in_loop)",
    ),
    # waves, drift and the machine's state (store/drift.py, store/machine_state.py); empty in
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
