"""The claims' verdicts, as tested, from claim_arms's per-prompt data (claims.py) on one pair and
task:

    verdicts = claim_verdicts(arms, per_prompt, settings)   # [Verdict]: (a)-(e), see below

Each reads "holds", "does not hold" or "not resolved", with its numbers. With [low, high] the
paired 95 % interval of a difference (10,000 resamples, seed 0) and M the metric's
non-inferiority margin, fixed before the run in the experiment's config
(configs/experiment/paper_claims.claims.toml, claims_settings.py), one precedence for all:

1. "X loses score against Y" holds when high < 0 (significantly below); then "X keeps Y's
   score" does NOT hold, whatever its margin says: the two cannot hold together.
2. Otherwise "X keeps Y's score" holds when low > -M (any loss is smaller than the margin),
   and "X loses" does not hold when low > -M either.
3. Otherwise both are not resolved.
"X exceeds Y" (an AL, or a score at matched AL) holds when low > 0, does not hold when
high <= 0. Matched AL: a Cactus arm whose paired AL interval against the other rule's contains
0 (the nearest such); without one the claim is not resolved and says so.

Stability: every verdict is recomputed under `stability_seeds` bootstrap seeds; its stability is
the share of seeds that give the printed outcome. Under `stable_share` it reads "borderline".

The claims: (a) each Cactus arm keeps SpS's score; (b) TAS loses score against SpS; (c) each
Cactus arm's AL exceeds SpS's, true by construction (h(x) >= q(x) at the drafted x, so its
acceptance min(1, h/p) is never below SpS's min(1, q/p)): a check of the engine, not a finding;
(d) Cactus keeps FLy's score at FLy's AL; (e) Cactus scores above TAS at matched AL (the paper's
contrast: Cactus keeps the score that TAS loses). A score claim is read on both IFEval metrics,
each with its own margin: prompt level (the row's score) and instruction level.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cactus_bench.report.claims import CACTUS, instruction_terms
from cactus_bench.report.claims_settings import ClaimSettings
from cactus_bench.report.leaderboard_power import PAIRED_SEED
from cactus_bench.store.bootstrap import percentile_interval, resample_counts

HOLDS, FAILS, OPEN = "holds", "does not hold", "not resolved"
BORDERLINE = "borderline"
METRICS = (("prompt", "prompt level"), ("inst", "instruction level"))


@dataclass(frozen=True)
class Verdict:
    claim: str  # "a".."e"
    statement: str  # the claim as tested
    outcome: str  # HOLDS | FAILS | OPEN: on the prompt level (claim c: on the AL)
    evidence: str  # the numbers behind it, one sentence
    inst_outcome: str | None = None  # the same rule on the instruction level, where measured
    stability: float | None = None  # share of the bootstrap seeds giving `outcome`
    inst_stability: float | None = None


def keeps_score(low: float, high: float, margin: float) -> str:
    return FAILS if high < 0 else HOLDS if low > -margin else OPEN


def loses_score(low: float, high: float, margin: float) -> str:
    return HOLDS if high < 0 else FAILS if low > -margin else OPEN


def exceeds(low: float, high: float, margin: float | None = None) -> str:
    """An AL or a score above the other's; no margin plays a part (a gain is a gain)."""
    return HOLDS if low > 0 else FAILS if high <= 0 else OPEN


class Paired:
    """Paired percentile intervals over ONE [B, n] resample matrix (default_rng(seed)), so every
    difference of one verdict set is taken over the same resampled prompts."""

    def __init__(self, n: int, resamples: int, seed: int):
        self.counts = resample_counts(n, resamples, np.random.default_rng(seed))  # [B, n]
        self.n = n

    def mean_difference(self, a, b) -> tuple[float, float | None, float | None]:
        differences = np.asarray(a, float) - np.asarray(b, float)  # [n]
        low, high = percentile_interval(self.counts @ differences / self.n)
        return float(differences.mean()), low, high

    def ratio_difference(self, top_a, bottom_a, top_b, bottom_b):
        arrays = [np.asarray(x, dtype=float) for x in (top_a, bottom_a, top_b, bottom_b)]
        estimate = arrays[0].sum() / arrays[1].sum() - arrays[2].sum() / arrays[3].sum()
        sums = [self.counts @ x for x in arrays]  # [B] each
        low, high = percentile_interval(sums[0] / sums[1] - sums[2] / sums[3])
        return float(estimate), low, high


def _interval(value, low, high) -> str:
    return f"{100 * value:+.1f} points [{100 * low:+.1f}, {100 * high:+.1f}]"


def _score_verdict(claim, statement, differences: dict, margins: dict, rule) -> Verdict:
    """differences {metric: (estimate, low, high)}, each read by `rule` against its margin."""
    outcomes, evidence = {}, []
    for metric, name in METRICS:
        if metric in differences and differences[metric][1] is not None:
            estimate, low, high = differences[metric]
            outcomes[metric] = rule(low, high, margins[metric])
            evidence.append(f"{name} {_interval(estimate, low, high)}")
    used = " / ".join(f"{100 * margins[m]:.1f}" for m, _ in METRICS if m in outcomes)
    text = f"{', '.join(evidence)}; margin {used} points"
    return Verdict(claim, statement, outcomes["prompt"], text, outcomes.get("inst"))


def _differences(paired: Paired, per_prompt: dict, inst: dict, label: str, other: str) -> dict:
    found = {"prompt": paired.mean_difference(per_prompt[label][0], per_prompt[other][0])}
    if label in inst and other in inst:
        found["inst"] = paired.mean_difference(inst[label], inst[other])
    return found


def _al_difference(paired: Paired, per_prompt: dict, label: str, other: str):
    ours, theirs = per_prompt[label][1], per_prompt[other][1]
    if ours is None or theirs is None or ours.steps.isna().any() or theirs.steps.isna().any():
        return None
    return paired.ratio_difference(ours.accepted, ours.steps, theirs.accepted, theirs.steps)


def verdicts_for_seed(arms, per_prompt: dict, settings: ClaimSettings, seed: int) -> list:
    """(a)-(e) (module doc) with the intervals of bootstrap seed `seed`."""
    by = arms.set_index("arm")
    present = list(per_prompt)
    paired = Paired(len(next(iter(per_prompt.values()))[0]), settings.resamples, seed)
    tables = {label: table for label, (_, table) in per_prompt.items()}
    inst = instruction_terms(tables) if all(t is not None for t in tables.values()) else {}
    margins = settings.margins
    cactus = [label for label in CACTUS if label in present]
    out = []
    for label in cactus:
        differences = _differences(paired, per_prompt, inst, label, "SpS")
        out.append(
            _score_verdict("a", f"{label} keeps SpS's score", differences, margins, keeps_score)
        )
    if "TAS" in present:
        differences = _differences(paired, per_prompt, inst, "TAS", "SpS")
        out.append(
            _score_verdict("b", "TAS loses score against SpS", differences, margins, loses_score)
        )
    for label in cactus:
        al = _al_difference(paired, per_prompt, label, "SpS")
        if al is None:
            continue
        evidence = (
            f"AL {by.loc[label].al:.3f} against SpS's {by.loc['SpS'].al:.3f}: difference "
            f"{al[0]:+.3f} [{al[1]:+.3f}, {al[2]:+.3f}]; true by construction (h(x) >= q(x) at "
            "the drafted x), so a check of the engine, not evidence for the rule"
        )
        statement = f"{label}'s AL exceeds SpS's (by construction)"
        out.append(Verdict("c", statement, exceeds(al[1], al[2]), evidence))
    for claim, other, says, rule in (
        ("d", "FLy", "keeps FLy's score at FLy's AL", keeps_score),
        ("e", "TAS", "scores above TAS at matched AL", exceeds),
    ):
        if other in present and cactus:
            out.append(
                _matched(claim, says, other, cactus, by, paired, per_prompt, inst, margins, rule)
            )
    return out


def _matched(claim, says, other, cactus, by, paired, per_prompt, inst, margins, rule) -> Verdict:
    """The Cactus arm matched to `other`'s AL: its paired AL interval contains 0 (the nearest
    such arm); unmatched, the claim is not resolved and names the arms around the other's AL."""
    al = {label: _al_difference(paired, per_prompt, label, other) for label in cactus}
    al = {label: value for label, value in al.items() if value is not None}
    if not al:
        statement = f"Cactus {says}"
        return Verdict(claim, statement, OPEN, "no per-prompt table to pair the arms' AL")
    matched = [label for label, (_, low, high) in al.items() if low <= 0 <= high]
    nearest = min(matched or al, key=lambda label: abs(al[label][0]))
    statement = f"{nearest} {says}"
    estimate, low, high = al[nearest]
    text = (
        f"AL {by.loc[nearest].al:.3f} against {other}'s {by.loc[other].al:.3f}: difference "
        f"{estimate:+.3f} [{low:+.3f}, {high:+.3f}]"
    )
    verdict = _score_verdict(
        claim, statement, _differences(paired, per_prompt, inst, nearest, other), margins, rule
    )
    if not matched:
        below = [label for label, value in al.items() if value[2] < 0]
        above = [label for label, value in al.items() if value[1] > 0]
        where = (
            "every Cactus δ of the sweep lies above it"
            if not below
            else (
                "every Cactus δ lies below it"
                if not above
                else "the δ swept bracket it, none matches"
            )
        )
        text += f"; not matched ({where}): score, unmatched"
        return Verdict(claim, statement, OPEN, f"{text}: {verdict.evidence}", OPEN)
    return replace(verdict, evidence=f"{text}; score {verdict.evidence}")


def claim_verdicts(arms, per_prompt: dict, settings: ClaimSettings) -> list[Verdict]:
    """The verdicts at seed PAIRED_SEED, each with its stability over the settings' seeds."""
    main = verdicts_for_seed(arms, per_prompt, settings, PAIRED_SEED)
    agree = np.zeros((len(main), 2))
    for seed in range(settings.stability_seeds):
        again = main if seed == PAIRED_SEED else verdicts_for_seed(arms, per_prompt, settings, seed)
        for index, (first, other) in enumerate(zip(main, again, strict=True)):
            agree[index] += (
                first.outcome == other.outcome,
                first.inst_outcome == other.inst_outcome,
            )
    shares = agree / settings.stability_seeds
    return [
        replace(
            verdict,
            stability=float(share[0]),
            inst_stability=None if verdict.inst_outcome is None else float(share[1]),
        )
        for verdict, share in zip(main, shares, strict=True)
    ]


def shown(outcome: str, stability: float | None, settings: ClaimSettings) -> str:
    """The outcome as printed: "borderline (holds in 87 % of 200 seeds)" when unstable."""
    if stability is None or stability >= settings.stable_share:
        return outcome
    return (
        f"{BORDERLINE} ({outcome} in {100 * stability:.0f} % of {settings.stability_seeds} seeds)"
    )
