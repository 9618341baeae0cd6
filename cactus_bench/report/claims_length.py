"""The claims page's length section, "Does a guard remove the cap-out inflation?": written only
where the CSV has a row of the length study (claims.LENGTH_ARMS), so a sweep without them keeps
its page byte for byte (docs/paper-claims-embedded.md says how to run them).

Per arm (claims.py's lines and rows, the per-prompt table where there is one): AL, λ against the
verifier alone, the share of answers that end on the token budget and its paired difference from
SpS (the share from the row's own cap_out_share where there is no per-prompt table), the row's
out-of-head commits per 1,000 tokens, repeat share and loop share (all answers),
and the same diagnostics over the capped answers only (the per-prompt table): a capped answer
that loops points to loops, one that commits far below q's head to wandering, neither to a
lower stop hazard. The sentences under the table compare each guarded Cactus arm with the bare
Cactus (δ = 1): whether its cap-out difference from SpS still excludes 0, and its AL cost.
"""

from __future__ import annotations

import pandas as pd

from cactus_bench.report.claims import LENGTH_ARMS

BARE = "Cactus (δ = 1)"
GUARDED = ("Cactus (δ = 1) stop=exact", "Cactus (δ = 1) near_top=0.2")
HEADING = "## Does a guard remove the cap-out inflation?"


def _num(value, form: str, scale: float = 1.0) -> str:
    return "—" if value is None or pd.isna(value) else form.format(scale * float(value) + 0.0)


def _interval(value, low, high, form: str, scale: float = 1.0) -> str:
    text = _num(value, form, scale)
    if text == "—" or low is None or pd.isna(low) or pd.isna(high):
        return text
    return f"{text} [{_num(low, form, scale)}, {_num(high, form, scale)}]"


def _first(*values):
    """The first value that is not empty (the per-prompt table's, else the row's own)."""
    return next((v for v in values if v is not None and not pd.isna(v)), None)


def capped_diagnostics(table: pd.DataFrame | None) -> dict:
    """Over the answers that ended on the budget: their count, loop share, mean repeat share
    and out-of-head commits per 1,000 of their tokens (None where the table lacks them)."""
    if table is None:
        return {}
    capped = table[table.stop_reason == "length"]
    found = {"capped": len(capped)}

    def whole(column: str) -> bool:  # tables scored before the diagnostics existed lack them
        return len(capped) > 0 and column in capped and capped[column].notna().all()

    if whole("ends_in_loop") and whole("repeat_share"):
        found["capped_loop_share"] = float(capped.ends_in_loop.mean())
        found["capped_repeat_share"] = float(capped.repeat_share.mean())
    if whole("out_of_head"):
        per_token = capped.out_of_head.sum() / capped.generated_tokens.sum()
        found["capped_out_of_head_per_1k"] = 1000.0 * float(per_token)
    return found


def length_section(arms: pd.DataFrame, rows: dict, per_prompt: dict) -> list[str]:
    """The section's lines (module doc); [] when no arm of LENGTH_ARMS has a row.
    arms: claims.claim_arms's lines; rows: {label: the arm's row}; per_prompt: claim_arms's."""
    labels = {arm.label for arm in LENGTH_ARMS}
    if not labels & set(arms.arm):
        return []
    lines = [
        HEADING,
        "",
        "| rule | AL [95 %] | λ vs verifier [95 %] | ends on budget % | − SpS [paired] "
        "| out-of-head / 1k | repeat share % | loop share % | capped: out-of-head / 1k "
        "| capped: repeat % | capped: loops % |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for line in arms.to_dict("records"):
        row = rows[line["arm"]]
        capped = capped_diagnostics(per_prompt[line["arm"]][1])
        get = line.get
        cells = [
            line["arm"],
            _interval(get("al"), get("al_ci_low"), get("al_ci_high"), "{:.2f}"),
            _interval(
                get("length_ratio"),
                get("length_ratio_ci_low"),
                get("length_ratio_ci_high"),
                "{:.3f}",
            ),
            _num(_first(get("ends_on_budget"), row.get("cap_out_share")), "{:.1f}", 100),
            _interval(
                get("budget_diff_sps"),
                get("budget_diff_sps_ci_low"),
                get("budget_diff_sps_ci_high"),
                "{:+.1f}",
                100,
            ),
            _num(row.get("out_of_head_per_1k"), "{:.1f}"),
            _num(row.get("repeat_share"), "{:.1f}", 100),
            _num(row.get("loop_share"), "{:.1f}", 100),
            _num(capped.get("capped_out_of_head_per_1k"), "{:.1f}"),
            _num(capped.get("capped_repeat_share"), "{:.1f}", 100),
            _num(capped.get("capped_loop_share"), "{:.1f}", 100),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    sentences = guard_sentences(arms)
    return lines + [""] + (sentences + [""] if sentences else [])


def guard_sentences(arms: pd.DataFrame) -> list[str]:
    """One line per guarded Cactus arm with a row: does its cap-out difference from SpS still
    exclude 0, and at what AL against the bare Cactus (δ = 1)."""
    by = arms.set_index("arm")
    found = []
    for label in GUARDED:
        if label not in by.index or pd.isna(by.loc[label].get("budget_diff_sps")):
            continue
        guarded = by.loc[label]
        low = guarded.get("budget_diff_sps_ci_low")
        removes = pd.notna(low) and low <= 0
        verdict = (
            "removes the cap-out inflation (its interval reaches 0)"
            if removes
            else "does not remove the cap-out inflation"
        )
        high = guarded.get("budget_diff_sps_ci_high")
        difference = _interval(guarded.budget_diff_sps, low, high, "{:+.1f}", 100)
        text = f"- {label} {verdict}: ends on the budget {difference} points against SpS (paired)"
        if BARE in by.index:
            bare = by.loc[BARE]
            text += (
                f", {BARE} {_num(bare.get('budget_diff_sps'), '{:+.1f}', 100)}; AL "
                f"{_num(guarded.al, '{:.3f}')} against {_num(bare.al, '{:.3f}')} "
                f"(cost {_num(bare.al - guarded.al, '{:+.3f}')})"
            )
        found.append(text + ".")
    return found
