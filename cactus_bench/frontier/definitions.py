"""What each frontier statistic means: written beside every CSV as <csv stem>.definitions.md.

One source for the definitions (docs/frontier.md points here). Notation: at position t of a
verifier context, p_t and q_t are the drafter's and verifier's processed laws, law_t the exact
law of the token a rule emits after one draft n ~ p_t, beta_t its exact acceptance probability.
Means are over positions; intervals are 95 % percentile intervals of a bootstrap over sequences
(`aggregate.py`), paired where two arms are compared (one weight matrix for all statistics).
"""

from __future__ import annotations

from pathlib import Path

COLUMNS_TEXT = {
    "pair": "model pair (configs/model/<pair>.yaml)",
    "prompt_set": "held_out:... (not in the drafter's training data) or drafter_train:..., then "
    "the prompts per source",
    "rule": "the sampler (cactus_exact:<f> for the exact rule with divergence f; cactus+<guard> "
    "for Cactus with one guard, e.g. cactus+stop=exact; verifier for rule-free rows)",
    "parameter": "the grid value (delta=, eps=, k=, alpha=, beta=, l=, T=, tau=, t=, K=); the "
    "cascades', FSD's and BiLD's tests read the temperature-1 untruncated laws, as their "
    "sources do",
    "value, ci_low, ci_high": "the statistic and its 95 % bootstrap interval (empty: none)",
    "n_positions": "positions the statistic is computed over",
}

STATISTICS_TEXT = {
    "acceptance": "mean beta_t, the exact probability that one draft n ~ p_t is accepted",
    "gain": "mean beta_t - beta_t(SpS): acceptance gained over SpS (paired)",
    "kl, reverse_kl, chi2, hellinger, tv": "mean D_f(law_t || q_t) of the emitted law, for f = "
    "KL(law||q), KL(q||law), Pearson chi2, squared Hellinger without the 1/2, total variation. "
    "This is the quantity Theorem 3 bounds by min(Gamma(delta), D_f(p||q)); inf when any "
    "position is infinite",
    "<f>_q50, <f>_q90, <f>_q99, <f>_max": "quantiles and max over positions of D_f(law_t || q_t)"
    " (no interval)",
    "<f>_share_above_delta": "share of positions with D_f(law_t || q_t) > delta (rules with a "
    "budget: cactus, cactus_exact, mentored); the per-draft target obeys the budget, the mixture "
    "emitted over drafts need not",
    "q_zero_mass": "mean mass law_t puts on tokens with q_t = 0",
    "q_zero_share": "share of positions where law_t puts mass on q_t = 0 (there KL(law||q) = inf)",
    "thm3_violation_share, thm3_max_excess": "share of positions where D_f(law_t || q_t) > "
    "D_f(p_t || q_t) for the rule's own f (Theorem 3's second bound), and the largest excess; "
    "a violation is a finding, printed by the run",
    "overshoot_draft_share": "mean over positions of sum_n p_t(n) 1[d_f(h_n || q_t) > delta]: "
    "drafts whose per-draft target breaks the budget (cactus rules; Corollary 6)",
    "overshoot_position_share": "share of positions where some draft's target breaks it",
    "overshoot_mean_excess, overshoot_excess_given_overshoot": "mean excess d_f - delta per "
    "draft, and over the drafts that break the budget only",
    "overshoot@q=[a,b),gamma=(c,d]": "within the cell of q_t(n) and gamma_n, the p-weighted share"
    " of drafts whose target breaks the budget (gamma <= 1/2 is Corollary 6's safe side; no "
    "interval); draft_mass@...: the cell's share of all draft mass",
    "paired_<stat>_vs:<rule>": "mean per-position difference, this arm minus <rule> at the same"
    " delta, with the paired bootstrap (cactus_exact:kl vs cactus: exact minus Taylor; mentored "
    "vs cactus_exact:reverse_kl: both bound KL(q || .) by delta)",
    "matched_<f>_acceptance_vs:<rule>": "mean beta_t of this arm minus <rule>'s acceptance at "
    "the same mean D_f(law || q): <rule>'s curve interpolated linearly between its two arms "
    "that bracket this arm's mean D_f (time-sharing between them), the interpolation solved "
    "again in every bootstrap replicate (paired); no row outside <rule>'s range or where either"
    " mean is infinite (matched.py)",
    "gain@H=[a,b), acceptance@H=[a,b)": "gain (acceptance for sps) over the positions whose "
    "verifier entropy H(q_t) lies in the bin",
    "acceptance@source=X, gain@source=X": "over the sequences of one prompt source",
    "al@m=M": "predicted accepted drafts per step at draft length M from the per-position beta_t "
    "(al.py states the approximation)",
    "entropy, positions, sequences": "verifier rows: mean H(q_t), counts",
    "stop_mass_ratio": "sum_t law_t(S) / sum_t q_t(S) over all positions (a q(S)-weighted "
    "mean of the per-position ratio), S the pair's stop set: EOS, the chat template's turn "
    "closer and end-of-text (`tasks.stop_set`; <think> and </think> are not in it). Below 1: "
    "the rule lowers the stop hazard per position",
    "stop_mass_ratio@stop": "the same over the positions where the verifier's own sampled token "
    "is in S (its answers' stops); n_positions counts them",
    "stop_mass": "mean law_t(S) (verifier row: mean q_t(S))",
    "out_of_head_per_1000": "1000 x mean law_t mass on the tokens with q_t(x) < c max q_t (c: "
    "the JSON's head_fraction, 0.2 by default): expected emitted tokens outside q's head per "
    "1,000 (verifier row: q's own); out_of_head_per_1000_vs_q: the paired difference",
    "emitted_entropy, emitted_entropy_vs_q": "mean H(law_t) in nats, and mean H(law_t) - "
    "H(q_t) (paired; H(q_t) is the verifier's entropy row). Below 0: the rule sharpens q",
    "stop_positions": "verifier row: positions whose sampled token is in S",
    "engine_first_acceptance, predicted_first_acceptance": "the HF engine's rate of accepting "
    "the first draft at sampled positions (Wilson interval) and the exact prediction there",
}


def definitions_text(csv_name: str) -> str:
    lines = [f"# Definitions for {csv_name}", "", __doc__.split("\n\n", 1)[1].strip(), ""]
    lines += ["## Columns", ""] + [f"- `{k}`: {v}" for k, v in COLUMNS_TEXT.items()]
    lines += ["", "## Statistics", ""] + [f"- `{k}`: {v}" for k, v in STATISTICS_TEXT.items()]
    return "\n".join(lines) + "\n"


def write_definitions(csv_path: Path) -> Path:
    path = csv_path.with_name(f"{csv_path.stem}.definitions.md")
    path.write_text(definitions_text(csv_path.name))
    return path
