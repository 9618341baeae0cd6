"""What a run prints when it ends: the headline numbers and where the row went."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cactus_bench.store.drift import drift_warning


@dataclass
class RunOutcome:
    """What happened: status "ok" (a row was appended) or "skipped" (already finished)."""

    status: str
    csv_path: Path
    config_hash: str
    run_id: str | None = None
    row: dict[str, Any] = field(default_factory=dict)


LAMBDA_LABEL = "λ (generated tokens / the verifier's)"


def _cell(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _with_interval(row: dict, name: str, fmt: str) -> str:
    """`1.42 [1.31, 1.55]` when the row has the 95% interval, else the point value."""
    low, high = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    interval = f" [{low:{fmt}}, {high:{fmt}}]" if low is not None and high is not None else ""
    return _cell(row.get(name), fmt) + interval


def _cap_out(row: dict) -> str:
    """`55.3 % (verifier 42.1 %, +13.1 [+8.9, +17.2] points)`, or the run's share alone."""
    share, base = row.get("cap_out_share"), row.get("baseline_cap_out_share")
    if share is None:
        return "-"
    text = f"{100 * share:.1f} %"
    if base is None:
        return text
    diff, low, high = (row.get(f"cap_out_diff{end}") for end in ("", "_ci_low", "_ci_high"))
    interval = f" [{100 * low:+.1f}, {100 * high:+.1f}]" if low is not None else ""
    return f"{text} (verifier {100 * base:.1f} %, {100 * diff:+.1f}{interval} points)"


def format_outcome(outcome: RunOutcome) -> str:
    """A small table of the headline numbers and the CSV path."""
    if outcome.status == "skipped":
        return f"skipped (already finished): {outcome.csv_path}"
    row = outcome.row
    base = row.get("tokens_per_s_baseline")
    lines = [
        f"{'score (' + str(row.get('score_name')) + ')':<44} {_with_interval(row, 'score', '.4f')}",
        f"{'AL (accepted drafts per step, no bonus)':<44} {_with_interval(row, 'al', '.3f')}",
        f"{'acceptance rate (accepted / drafted)':<44} {_cell(row.get('accept_rate'), '.3f')}",
        f"{'tokens/s (run' + (' / verifier baseline)' if base else ')'):<44} "
        f"{_cell(row.get('tokens_per_s_spec'), '.2f')}" + (f" / {base:.2f}" if base else ""),
        f"{'speedup (tokens/s ratio)':<44} {_with_interval(row, 'speedup_tokens', '.3f')}",
        f"{'speedup (wall time: time to the answers)':<44} "
        f"{_with_interval(row, 'speedup_walltime', '.3f')}",
        f"{LAMBDA_LABEL:<44} {_with_interval(row, 'length_ratio', '.3f')}",
        f"{'answers ending on the token budget':<44} {_cap_out(row)}",
    ]
    if row.get("score_ci_low") is not None:
        lines.append("[low, high]: 95% paired bootstrap interval over prompts")
    title = f"{row['model_pair']} / {row['task']} / {row['sampler']}  ({row['n_prompts']} prompts)"
    warnings = [w for w in (fallback_warning(row), drift_warning(row)) if w]
    return "\n".join(
        [
            title,
            *("  " + line for line in lines),
            f"results: {outcome.csv_path} (run_id {outcome.run_id})",
            *warnings,
        ]
    )


def fallback_warning(row: dict) -> str | None:
    """A line when vLLM's own sampler, not the rule, decided some verification steps."""
    fallbacks, steps = row.get("draft_probs_fallbacks"), row.get("num_steps")
    if not fallbacks:
        return None
    return (
        f"warning: {fallbacks} of {steps} verification steps went to vLLM's own exact sampler "
        "(vLLM passed no draft probabilities, near max_model_len), so the rule did not decide "
        "them (column draft_probs_fallbacks); raise backend.max_model_len or lower "
        "max_new_tokens"
    )
