"""The claims report's files from the sweep's CSV and its per-prompt table (claims.py has the
numbers): OUT/tables/paper_claims.{md,csv} and OUT/figures/paper_claims_score_vs_al.{png,pdf}.
`make tables plots` write them beside the generic tables whenever the CSVs hold rows of
experiment `paper_claims` (report/__main__.py), byte for byte the same from the same files.

Verdicts are written only for a finished sweep: every arm of claims.ARMS with a row, each on all
IFEVAL_PROMPTS prompts; until then the page says which arms and prompts are still missing. The
length study's arms (claims.LENGTH_ARMS) add lines and a section (claims_length.py) where they
have rows, and nothing where they have none.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from cactus_bench.report.claims import ARMS, arm_rows, claim_arms
from cactus_bench.report.claims_length import length_section
from cactus_bench.report.claims_requests import lm_eval_instructions, load_requests
from cactus_bench.report.claims_settings import ClaimSettings, claim_settings
from cactus_bench.report.claims_verdicts import claim_verdicts, shown
from cactus_bench.report.reference import Reference
from cactus_bench.store.schema import RENAMED_COLUMNS

EXPERIMENT = "paper_claims"
IFEVAL_PROMPTS = 541
# the paper's own pair (Table 1), whose IFEval cells report/paper_values.yaml lacks
PAPER_PAIR = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B", 20)
PAPER_RULE = {"SpS": ("sps", None), "TAS": ("tas", None)}
PAPER_RULE |= {f"Cactus (δ = {d:g})": ("cactus", d) for d in (0.5, 1.0, 2.0)}
PAPER_RULE["verifier alone"] = ("verifier", None)


def claims_csvs(frame: pd.DataFrame) -> list[Path]:
    """The CSVs among a report's inputs that hold rows of the claims sweep."""
    found = []
    for name in sorted(set(frame.source_file)):
        names = pd.read_csv(name, usecols=lambda column: column == "experiment")
        if "experiment" in names and (names.experiment == EXPERIMENT).any():
            found.append(Path(name))
    return found


def claims_rows(csv: Path) -> pd.DataFrame:
    """The finished rows of the claims sweep in `csv`."""
    rows = pd.read_csv(csv).rename(columns=RENAMED_COLUMNS)
    return rows[(rows.status == "ok") & (rows.experiment == EXPERIMENT)]


def _pct(value, low=None, high=None, signed: bool = False) -> str:
    if value is None or pd.isna(value):
        return ""
    form = "{:+.1f}" if signed else "{:.1f}"
    text = form.format(100 * float(value) + 0.0)
    if low is None or pd.isna(low) or pd.isna(high):
        return text
    return f"{text} [{form.format(100 * float(low) + 0.0)}, {form.format(100 * float(high) + 0.0)}]"


def _al(line) -> str:
    if pd.isna(line.al):
        return "—"
    if pd.isna(line.al_ci_low):
        return f"{line.al:.2f}"
    return f"{line.al:.2f} [{line.al_ci_low:.2f}, {line.al_ci_high:.2f}]"


def _ratio(value, low, high) -> str:
    if value is None or pd.isna(value):
        return ""
    if low is None or pd.isna(low):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _paper(reference: Reference, arm: str, metric: str) -> str:
    """The paper's IFEval cell for this arm and metric (score or al), empty where it lacks it."""
    if arm not in PAPER_RULE:
        return ""
    sampler, delta = PAPER_RULE[arm]
    drafter, verifier, m = PAPER_PAIR
    if sampler == "verifier":
        drafter, m = None, None
    hit = reference.lookup(drafter, verifier, m, sampler, delta, "ifeval", metric)
    return "" if hit is None else f"{hit.value:g}"


def table_markdown(arms: pd.DataFrame, mde: dict, reference: Reference) -> str:
    """The paper's layout: rule x AL, prompt- and instruction-level strict accuracy (%)."""
    lines = [
        "| rule | AL [95 %] | prompt-level % [95 %] | − SpS [paired] | − verifier [paired] "
        "| instruction-level % [95 %] | − SpS [paired] | − verifier [paired] "
        "| ends on budget % | − SpS [paired] | λ vs verifier [95 %] | mean tokens "
        "| paper AL (another pair) | paper IFEval % (another pair) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for line in arms.itertuples():
        get = line._asdict().get

        def diff(name: str, get=get) -> str:
            return _pct(get(name), get(f"{name}_ci_low"), get(f"{name}_ci_high"), True)

        cells = [
            line.arm,
            _al(line),
            _pct(line.prompt_acc, line.prompt_acc_ci_low, line.prompt_acc_ci_high),
            diff("prompt_diff_sps"),
            diff("prompt_diff_verifier"),
            _pct(get("inst_acc"), get("inst_acc_ci_low"), get("inst_acc_ci_high")),
            diff("inst_diff_sps"),
            diff("inst_diff_verifier"),
            _pct(get("ends_on_budget")),
            diff("budget_diff_sps"),
            _ratio(get("length_ratio"), get("length_ratio_ci_low"), get("length_ratio_ci_high")),
            "" if pd.isna(get("mean_answer_tokens")) else f"{get('mean_answer_tokens'):.0f}",
            _paper(reference, line.arm, "al"),
            _paper(reference, line.arm, "score"),
        ]
        lines.append("| " + " | ".join(cell or "—" for cell in cells) + " |")
    power = [
        f"{mde['n']} prompts. The paper's columns are its Table 1 pair ({PAPER_PAIR[0]} -> "
        f"{PAPER_PAIR[1]}, m = {PAPER_PAIR[2]}), another pair and model size: empty where "
        "cactus_bench/report/paper_values.yaml has no IFEval value."
    ]
    ran = [f"{line.arm} {line.params}" for line in arms.itertuples() if _has_params(line.params)]
    if ran:
        power.append(f"Parameters as run: {'; '.join(ran)}.")
    for metric, name in (("prompt", "prompt-level"), ("inst", "instruction-level")):
        if not math.isnan(mde.get(metric, math.nan)):
            power.append(
                f"Minimum detectable difference from SpS at 80 % power ({name}, two-sided paired "
                f"test at alpha = 0.05, normal approximation): {100 * mde[metric]:.1f} points."
            )
    return "\n".join(lines) + "\n\n" + " ".join(power) + "\n"


def _has_params(params) -> bool:
    return isinstance(params, str) and params not in ("", "{}")


def missing_for_verdicts(rows: pd.DataFrame) -> list[str]:
    """What the sweep still lacks before verdicts are written (empty: finished)."""
    order = [arm.label for arm in ARMS]
    present = {label for label, row in arm_rows(rows) if int(row.n_prompts) == IFEVAL_PROMPTS}
    return sorted(set(order) - present, key=order.index)


def write_claims_tables(
    csv: Path, out: Path, reference: Reference | None, settings: ClaimSettings | None = None
) -> list[Path]:
    """OUT/tables/paper_claims.{md,csv} from `csv` and its per-prompt table (reference: the
    paper's values, None to leave them out; settings: the experiment's, by default)."""
    reference = reference or Reference.empty()
    rows = claims_rows(csv)
    requests = load_requests(csv)
    settings = settings or claim_settings(EXPERIMENT)
    arms, mde, per_prompt = claim_arms(rows, requests, settings.resamples)
    out.mkdir(parents=True, exist_ok=True)
    table_csv = out / f"{EXPERIMENT}.csv"
    arms.to_csv(table_csv, index=False, float_format="%.6g")
    parts = [
        "# Paper claims: IFEval on the embedded pair",
        "",
        table_markdown(arms, mde, reference),
    ]
    if requests is None:
        parts.append(
            "No per-prompt table beside the CSV: instruction level, budget share and the AL "
            "difference need `python -m cactus_bench.report claims-requests` (make paper-claims).\n"
        )
    parts += length_section(arms, dict(arm_rows(rows)), per_prompt)  # [] without its arms
    missing = missing_for_verdicts(rows)
    parts += ["## Verdicts", ""]
    if missing:
        parts.append(
            f"Not written: the sweep has not finished ({', '.join(missing)} without a row on all "
            f"{IFEVAL_PROMPTS} prompts).\n"
        )
    else:
        parts += [settings_sentence(settings), ""]
        for verdict in claim_verdicts(arms, per_prompt, settings):
            parts.append(verdict_line(verdict, settings))
        parts.append("")
        parts += instruction_check(rows, per_prompt)
    page = out / f"{EXPERIMENT}.md"
    page.write_text("\n".join(parts))
    return [table_csv, page]


def settings_sentence(settings: ClaimSettings) -> str:
    margins = settings.margins
    return (
        f"Margins, fixed before the run (configs/experiment/{EXPERIMENT}.claims.toml): "
        f"{100 * margins['prompt']:.1f} points prompt level, {100 * margins['inst']:.1f} "
        f"instruction level. Paired percentile bootstrap, {settings.resamples:,} resamples, seed "
        f"0; stability: the share of {settings.stability_seeds} bootstrap seeds giving the "
        f'outcome (below {100 * settings.stable_share:.0f} %: borderline). "Keeps" never holds '
        'where "loses" does (claims_verdicts.py).'
    )


def verdict_line(verdict, settings: ClaimSettings) -> str:
    def one(outcome, stability) -> str:
        return f"**{shown(outcome, stability, settings)}** (stability {100 * stability:.0f} %)"

    outcome = one(verdict.outcome, verdict.stability)
    if verdict.inst_outcome is not None:
        outcome += f" prompt level, {one(verdict.inst_outcome, verdict.inst_stability)}"
        outcome += " instruction level"
    return f"- ({verdict.claim}) {verdict.statement}: {outcome}. {verdict.evidence}."


def instruction_check(rows: pd.DataFrame, per_prompt: dict) -> list[str]:
    """Each arm's instructions followed in the per-prompt table against its own lm-eval metric:
    a line naming the arms that differ (claims_requests.py says why they can), else nothing."""
    found = []
    for label, row in arm_rows(rows):
        table = per_prompt[label][1]
        accuracy = lm_eval_instructions(row)
        if table is None or accuracy is None:
            continue
        total = int(table.inst_total.sum())
        followed, theirs = int(table.inst_followed.sum()), round(accuracy * total)
        if followed != theirs:
            found.append(f"{label} {followed} against {theirs}")
    if not found:
        return []
    return [
        "Instruction counts of the per-prompt table that differ from the row's own lm-eval "
        f"metric (of {total} instructions): {'; '.join(found)}. Those lines were re-scored "
        "without lm-eval's random state, which picks the letter of IFEval documents 19 and 22; "
        "`scripts/paper_claims_requests.py` re-scores them exactly where the records are.",
        "",
    ]
