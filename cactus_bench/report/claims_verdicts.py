"""The claims' verdicts, as tested, from claim_arms's lines (claims.py) on one pair and task:

    verdicts = claim_verdicts(arms, mde, per_prompt)   # [Verdict]: (a)-(e), see below

Each reads "holds", "does not hold" or "not resolved at this power", with its numbers. With
[low, high] the paired 95 % interval of a difference and the MDE as the margin:
- "X keeps Y's score" holds when low > -MDE (any loss is below what the run can detect), does
  not hold when high < 0, and is not resolved otherwise;
- "X loses score against Y" holds when high < 0, does not hold when low > -MDE;
- "X exceeds Y" (an AL, or a score at matched AL) holds when low > 0, does not hold when
  high <= 0;
- matched AL: the Cactus arm of the AL nearest the other rule's, matched when their paired AL
  interval contains 0; unmatched, the claim is not resolved (no δ of the sweep reaches it).
The claims: (a) each Cactus arm keeps SpS's score; (b) TAS loses score against SpS; (c) each
Cactus arm's AL exceeds SpS's; (d) Cactus keeps FLy's score at matched AL; (e) Cactus scores
above TAS at matched AL (the paper's contrast: Cactus keeps the score that TAS loses).

A score claim is read on both IFEval metrics, each with its own MDE: prompt level (the row's
score) and instruction level. They can disagree: an IFEval prompt carries 1-3 instructions, so
the instruction level resolves smaller differences, and a page that printed one outcome would
hide the other.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from cactus_bench.report.claims import CACTUS, instruction_terms, paired_ratio_difference
from cactus_bench.report.leaderboard_power import paired_difference

HOLDS, FAILS, OPEN = "holds", "does not hold", "not resolved at this power"
METRICS = (("prompt", "prompt level"), ("inst", "instruction level"))


@dataclass(frozen=True)
class Verdict:
    claim: str  # "a".."e"
    statement: str  # the claim as tested
    outcome: str  # HOLDS | FAILS | OPEN: on the prompt level (claim c: on the AL)
    evidence: str  # the numbers behind it, one sentence
    inst_outcome: str | None = None  # the same rule on the instruction level, where measured


def keeps_score(low: float, high: float, mde: float) -> str:
    return HOLDS if low > -mde else FAILS if high < 0 else OPEN


def loses_score(low: float, high: float, mde: float) -> str:
    return HOLDS if high < 0 else FAILS if low > -mde else OPEN


def exceeds(low: float, high: float, mde: float | None = None) -> str:
    """An AL or a score above the other's; the MDE plays no part (a gain is a gain)."""
    return HOLDS if low > 0 else FAILS if high <= 0 else OPEN


def _interval(value, low, high) -> str:
    return f"{100 * value:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]"


def _score_verdict(claim, statement, differences: dict, mde: dict, rule) -> Verdict:
    """differences {metric: (estimate, low, high)} of one arm against another, prompt level
    always, instruction level where measured; each read by `rule` against its metric's MDE."""
    outcomes, evidence = {}, []
    for metric, name in METRICS:
        if metric in differences and not pd.isna(differences[metric][1]):
            estimate, low, high = differences[metric]
            outcomes[metric] = rule(low, high, mde[metric])
            evidence.append(f"{name} {_interval(estimate, low, high)}")
    margins = " / ".join(f"{100 * mde[metric]:.1f}" for metric, _ in METRICS if metric in outcomes)
    text = f"{', '.join(evidence)}; MDE {margins} points"
    return Verdict(claim, statement, outcomes["prompt"], text, outcomes.get("inst"))


def _against(line: pd.Series, versus: str) -> dict:
    """An arm's paired differences from `versus` ("sps") per metric, from its table line."""
    found = {}
    for metric, _ in METRICS:
        name = f"{metric}_diff_{versus}"
        if not pd.isna(line.get(name, np.nan)):
            found[metric] = (line[name], line[f"{name}_ci_low"], line[f"{name}_ci_high"])
    return found


def claim_verdicts(arms: pd.DataFrame, mde: dict, per_prompt: dict) -> list[Verdict]:
    """(a)-(e) as the module doc says; arms, mde and per_prompt from claims.claim_arms."""
    by = arms.set_index("arm")
    cactus = [label for label in CACTUS if label in by.index]
    out = []
    for label in cactus:
        statement = f"{label} keeps SpS's score"
        out.append(_score_verdict("a", statement, _against(by.loc[label], "sps"), mde, keeps_score))
    if "TAS" in by.index:
        statement = "TAS loses score against SpS"
        out.append(_score_verdict("b", statement, _against(by.loc["TAS"], "sps"), mde, loses_score))
    for label in cactus:
        line = by.loc[label]
        low, high = line.get("al_diff_sps_ci_low"), line.get("al_diff_sps_ci_high")
        if low is None or pd.isna(low):
            continue
        evidence = (
            f"AL {line.al:.3f} against SpS's {by.loc['SpS'].al:.3f}: difference "
            f"{line.al_diff_sps:+.3f} [{low:+.3f}, {high:+.3f}]"
        )
        out.append(Verdict("c", f"{label}'s AL exceeds SpS's", exceeds(low, high), evidence))
    for claim, other, says, rule in (
        ("d", "FLy", "keeps FLy's score", keeps_score),
        ("e", "TAS", "scores above TAS", exceeds),
    ):
        if other in by.index and cactus:
            nearest = min(cactus, key=lambda c: abs(by.loc[c].al - by.loc[other].al))
            statement = f"{nearest} {says} at matched AL"
            out.append(_matched(claim, statement, (nearest, other), by, per_prompt, mde, rule))
    return out


def _matched(claim, statement, pair, by, per_prompt, mde, rule) -> Verdict:
    """A Cactus arm against another rule at matched AL (module doc): only a pair whose paired
    AL interval contains 0 gets a score verdict; the evidence gives the scores either way."""
    label, other = pair
    (ours, our_table), (theirs, their_table) = per_prompt[label], per_prompt[other]
    if our_table is None or their_table is None:
        return Verdict(claim, statement, OPEN, "no per-prompt table to pair the two arms' AL")
    al = paired_ratio_difference(
        our_table.accepted, our_table.steps, their_table.accepted, their_table.steps
    )
    inst = instruction_terms({label: our_table, other: their_table})
    differences = {
        "prompt": paired_difference(ours, theirs),
        "inst": paired_difference(inst[label], inst[other]),
    }
    verdict = _score_verdict(claim, statement, differences, mde, rule)
    text = (
        f"AL {by.loc[label].al:.3f} against {other}'s {by.loc[other].al:.3f}: difference "
        f"{al[0]:+.3f} [{al[1]:+.3f}, {al[2]:+.3f}]"
    )
    if not al[1] <= 0 <= al[2]:
        text += f", no Cactus δ of the sweep matches {other}'s AL; score, unmatched"
        return Verdict(claim, statement, OPEN, f"{text}: {verdict.evidence}")
    return replace(verdict, evidence=f"{text}; score {verdict.evidence}")
