"""Per-position statistics -> the long-format CSV rows (every mean with its 95 % interval).

Columns: pair, prompt_set, rule, parameter, statistic, value, ci_low, ci_high, n_positions.
rule is the sampler name (cactus_exact with its divergence: `cactus_exact:kl`), parameter its
value (`delta=0.5`, `eps=0.09`, `k=5`, `alpha=0.25`, empty for sps). Statistics (the per-position
distributions, Theorem 3's check and the paired rows are in distribution.py):

    acceptance           mean beta_t (exact P(accept) of one draft)
    gain                 mean beta_t - beta_t(SpS): the acceptance gained over SpS
    <f>                  mean D_f(law || q_t) of the emitted token's law, f in kl reverse_kl
                         chi2 hellinger tv (the paper's Gamma(delta) bounds it, Theorem 3)
    q_zero_mass          mean law mass where q_t = 0; q_zero_share: share of positions where
                         the law puts mass on q_t = 0 (there KL(law || q_t) = inf)
    overshoot_*          cactus rules: draft_share (P(d_f(h_n || q) > delta), n ~ p),
                         position_share (some draft breaks it), mean_excess (nats, per draft),
                         excess_given_overshoot (mean excess over the drafts that break it)
    gain@H=[a,b)         gain over the positions whose H(q_t) lies in [a, b) (acceptance@H for sps)
    acceptance@source=X  acceptance (and gain@source=X) over the sequences of one prompt source
    al@m=M               predicted AL for draft length M (al.py states the approximation)
    entropy, positions, sequences   (rule "verifier")

and, from `stop_rows`, what the emitted law does to the stop and to q's head (exact, per arm):

    stop_mass_ratio      sum_t law_t(S) / sum_t q_t(S), S the pair's stop set (q(S)-weighted)
    stop_mass_ratio@stop the same over the positions where the verifier's own token is in S
    stop_mass            mean law_t(S)
    out_of_head_per_1000 1000 x mean law_t mass on {x: q_t(x) < c max q_t}; _vs_q paired
    emitted_entropy      mean H(law_t); emitted_entropy_vs_q: mean H(law_t) - H(q_t), paired
    stop_mass, out_of_head_per_1000, stop_positions  (rule "verifier": q's own)
"""

from __future__ import annotations

import torch

from cactus_bench.frontier.aggregate import (
    Estimate,
    bin_label,
    entropy_bins,
    per_sequence_sums,
    ratio_estimate,
)
from cactus_bench.frontier.al import expected_steps_and_accepts
from cactus_bench.samplers import DIVERGENCES

COLUMNS = (
    "pair",
    "prompt_set",
    "rule",
    "parameter",
    "statistic",
    "value",
    "ci_low",
    "ci_high",
    "n_positions",
)


def _rows(arms, statistic: str, estimate: Estimate, count, keep=None) -> list[dict]:
    """One row per arm (where keep[a] is true) for a [A] estimate."""
    rows = []
    counts = torch.broadcast_to(torch.as_tensor(count, dtype=torch.float64), estimate.value.shape)
    for index, arm in enumerate(arms):
        if keep is not None and not bool(keep[index]):
            continue
        rows.append(
            {
                "rule": arm.rule,
                "parameter": arm.parameter,
                "statistic": statistic,
                "value": float(estimate.value[index]),
                "ci_low": float(estimate.low[index]),
                "ci_high": float(estimate.high[index]),
                "n_positions": int(counts[index]),
            }
        )
    return rows


def summary_rows(conf, arms, stats, entropy, sequence, lengths, weights, sources, progress=True):
    """All rows but the engine check's. stats: {name: [A, N]}; entropy, sequence: [N];
    lengths: [S] positions per sequence; weights: [B, S] bootstrap weights; sources: [S] the
    prompt source of each sequence."""
    num_seq = lengths.shape[0]
    ones = torch.ones_like(entropy, dtype=torch.float64)
    counts = per_sequence_sums(ones, sequence, num_seq)  # [S]
    total = int(lengths.sum())

    def mean(values):  # [A, N] -> Estimate of the per-position mean
        return ratio_estimate(per_sequence_sums(values, sequence, num_seq), counts, weights)

    beta = stats["beta"]
    gain = beta - beta[0:1]  # arms[0] is sps
    rows = _rows(arms, "acceptance", mean(beta), total)
    rows += _rows(arms, "gain", mean(gain), total, [a.family != "sps" for a in arms])
    for name in (*DIVERGENCES, "q_zero_mass"):
        rows += _rows(arms, name, mean(stats[name]), total)
    rows += _rows(arms, "q_zero_share", mean((stats["q_zero_mass"] > 0).double()), total)
    cactus = [a.kind in ("cactus", "cactus_exact") for a in arms]
    exceed, excess = torch.nan_to_num(stats["exceed"]), torch.nan_to_num(stats["excess"])
    rows += _rows(arms, "overshoot_draft_share", mean(exceed), total, cactus)
    rows += _rows(
        arms, "overshoot_position_share", mean(torch.nan_to_num(stats["exceed_any"])), total, cactus
    )
    rows += _rows(arms, "overshoot_mean_excess", mean(excess), total, cactus)
    exceed_sums = per_sequence_sums(exceed, sequence, num_seq)
    given = ratio_estimate(per_sequence_sums(excess, sequence, num_seq), exceed_sums, weights)
    rows += _rows(
        arms,
        "overshoot_excess_given_overshoot",
        given,
        total,
        [c and bool(exceed_sums[i].sum() > 0) for i, c in enumerate(cactus)],
    )

    bins = entropy_bins(entropy, conf.entropy_edges)
    for index in range(len(conf.entropy_edges) - 1):
        inside = (bins == index).double()  # [N]
        in_bin = int(inside.sum())
        if in_bin == 0:
            continue
        bin_counts = per_sequence_sums(inside, sequence, num_seq)
        label = bin_label(conf.entropy_edges, index)
        estimate = ratio_estimate(
            per_sequence_sums(gain * inside, sequence, num_seq), bin_counts, weights
        )
        rows += _rows(arms, f"gain@H={label}", estimate, in_bin, [a.family != "sps" for a in arms])
        estimate = ratio_estimate(
            per_sequence_sums(beta[:1] * inside, sequence, num_seq), bin_counts, weights
        )
        rows += _rows(arms[:1], f"acceptance@H={label}", estimate, in_bin)

    for source in dict.fromkeys(sources):  # per prompt source, when the set mixes several
        if len(set(sources)) < 2:
            break
        chosen = torch.tensor([name == source for name in sources])[sequence].double()  # [N]
        in_source = per_sequence_sums(chosen, sequence, num_seq)
        for statistic, values in (("acceptance", beta), ("gain", gain)):
            estimate = ratio_estimate(
                per_sequence_sums(values * chosen, sequence, num_seq), in_source, weights
            )
            keep = None if statistic == "acceptance" else [a.family != "sps" for a in arms]
            rows += _rows(arms, f"{statistic}@source={source}", estimate, int(chosen.sum()), keep)
    rows += al_rows(arms, beta, sequence, lengths, conf.al_max_m, weights, progress)
    rows += _verifier_rows(entropy, sequence, counts, weights, total, num_seq)
    return rows


def al_rows(arms, beta, sequence, lengths, max_m, weights, progress=True) -> list[dict]:
    """Predicted AL(m), m = 1..max_m, for every arm: [A, N] beta laid out as [A, S, T]."""
    num_seq, width = lengths.shape[0], int(lengths.max())
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(beta.shape[1]) - starts[sequence]  # t within its sequence
    laid_out = torch.zeros(beta.shape[0], num_seq, width, dtype=torch.float64)
    laid_out[:, sequence, position] = beta
    accepted, steps = expected_steps_and_accepts(laid_out, lengths, max_m, progress)
    rows = []
    total = int(lengths.sum())
    for m in range(1, max_m + 1):
        rows += _rows(
            arms, f"al@m={m}", ratio_estimate(accepted[m - 1], steps[m - 1], weights), total
        )
    return rows


def _verifier_rows(entropy, sequence, counts, weights, total, num_seq) -> list[dict]:
    estimate = ratio_estimate(per_sequence_sums(entropy[None], sequence, num_seq), counts, weights)
    base = {"rule": "verifier", "parameter": "", "n_positions": total}
    return [
        {
            **base,
            "statistic": "entropy",
            "value": float(estimate.value[0]),
            "ci_low": float(estimate.low[0]),
            "ci_high": float(estimate.high[0]),
        },
        {**base, "statistic": "positions", "value": float(total), "ci_low": None, "ci_high": None},
        {
            **base,
            "statistic": "sequences",
            "value": float(num_seq),
            "ci_low": None,
            "ci_high": None,
        },
    ]


def stop_rows(arms, stats, verifier, at_stop, sequence, lengths, weights) -> list[dict]:
    """The stop-mass ratio, out-of-head mass and emitted entropy of every arm, against q's.

    stats: {name: [A, N]} (stop_mass NaN when no stop set was given: no stop rows);
    verifier: {"stop_mass": [N] q_t(S), "out_of_head": [N], "entropy": [N] H(q_t)};
    at_stop: [N] bool, the verifier's own token is in S; weights: [B, S]."""
    num_seq, total = lengths.shape[0], int(lengths.sum())

    def sums(values):  # [..., N] -> [..., S]
        return per_sequence_sums(values, sequence, num_seq)

    counts = sums(torch.ones(total, dtype=torch.float64))
    rows = []
    if not bool(torch.isnan(stats["stop_mass"]).all()):
        law_stop, q_stop = stats["stop_mass"], verifier["stop_mass"]
        rows += _rows(
            arms, "stop_mass_ratio", ratio_estimate(sums(law_stop), sums(q_stop), weights), total
        )
        stops = at_stop.double()
        if int(stops.sum()):
            estimate = ratio_estimate(sums(law_stop * stops), sums(q_stop * stops), weights)
            rows += _rows(arms, "stop_mass_ratio@stop", estimate, int(stops.sum()))
        rows += _rows(arms, "stop_mass", ratio_estimate(sums(law_stop), counts, weights), total)
    per_1000 = {"out_of_head_per_1000": 1000.0}
    pairs = (
        ("out_of_head_per_1000", stats["out_of_head"], verifier["out_of_head"]),
        ("emitted_entropy", stats["emitted_entropy"], verifier["entropy"]),
    )
    for name, law_values, q_values in pairs:
        scale = per_1000.get(name, 1.0)
        for statistic, values in ((name, law_values), (f"{name}_vs_q", law_values - q_values)):
            estimate = ratio_estimate(sums(values * scale), counts, weights)
            rows += _rows(arms, statistic, estimate, total)
    rows += _verifier_stop_rows(verifier, at_stop, sums, counts, weights, total)
    return rows


def _verifier_stop_rows(verifier, at_stop, sums, counts, weights, total) -> list[dict]:
    base = {"rule": "verifier", "parameter": "", "n_positions": total}
    rows = []
    named = [("out_of_head_per_1000", verifier["out_of_head"] * 1000.0)]
    if not bool(torch.isnan(verifier["stop_mass"]).all()):
        named.insert(0, ("stop_mass", verifier["stop_mass"]))
    for statistic, values in named:
        estimate = ratio_estimate(sums(values[None]), counts, weights)
        rows.append(
            {
                **base,
                "statistic": statistic,
                "value": float(estimate.value[0]),
                "ci_low": float(estimate.low[0]),
                "ci_high": float(estimate.high[0]),
            }
        )
    stops = float(at_stop.sum())
    rows.append(
        {**base, "statistic": "stop_positions", "value": stops, "ci_low": None, "ci_high": None}
    )
    return rows
