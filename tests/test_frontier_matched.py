"""Rule pairs at matched divergence (frontier/matched.py) against a reference written here."""

import numpy as np
import pytest
import torch

from cactus_bench.frontier.aggregate import bootstrap_weights
from cactus_bench.frontier.arms import Arm
from cactus_bench.frontier.matched import matched_rows
from cactus_bench.frontier.stats import chunk_statistics
from cactus_bench.samplers import DIVERGENCES

pytestmark = pytest.mark.usefixtures("single_thread")


def _constant_stats(arms, beta, kl, positions=8):
    """Per-position statistics that equal the given per-arm means at every position."""
    stats = {}
    for name in DIVERGENCES:
        values = (
            torch.tensor(kl, dtype=torch.float64)
            if name == "kl"
            else torch.full((len(arms),), torch.inf, dtype=torch.float64)
        )
        stats[name] = values[:, None].expand(len(arms), positions).clone()
    stats["beta"] = torch.tensor(beta, dtype=torch.float64)[:, None].expand(-1, positions).clone()
    sequence = torch.arange(positions) // 2
    return stats, sequence, torch.full((positions // 2,), 2)


def test_the_match_interpolates_the_earlier_rule_between_its_bracketing_arms():
    arms = [Arm("lenience", 0.9), Arm("lenience", 0.1), Arm("mentored", 0.1), Arm("mentored", 9)]
    # lenience: KL 0 -> beta 0.5, KL 1 -> beta 0.6; mentored at KL 0.25 accepts 0.7; its second
    # arm (KL 2) lies outside lenience's range: no row
    stats, sequence, lengths = _constant_stats(arms, [0.5, 0.6, 0.7, 0.9], [0.0, 1.0, 0.25, 2.0])
    rows = matched_rows(arms, stats, sequence, lengths, bootstrap_weights(4, 100, seed=0))
    assert len(rows) == 1
    row = rows[0]
    assert (row["rule"], row["parameter"]) == ("mentored", "delta=0.1")
    assert row["statistic"] == "matched_kl_acceptance_vs:lenience"
    assert row["value"] == pytest.approx(0.7 - 0.525)
    # every position equal: each replicate gives the same difference
    assert row["ci_low"] == pytest.approx(0.175) and row["ci_high"] == pytest.approx(0.175)
    # the other f are infinite for every arm here: nothing to match on
    assert not [r for r in rows if not r["statistic"].startswith("matched_kl")]


def _reference(beta_a, div_a, beta_b, div_b):
    """The matched difference computed from scratch: sort B by divergence, find the bracket."""
    order = np.argsort(div_b)
    xs, ys = np.asarray(div_b)[order], np.asarray(beta_b)[order]
    for lo in range(len(xs) - 1):
        if xs[lo] <= div_a <= xs[lo + 1]:
            share = (div_a - xs[lo]) / (xs[lo + 1] - xs[lo])
            return beta_a - (ys[lo] + share * (ys[lo + 1] - ys[lo]))
    return None


def test_matched_rows_equal_an_independent_computation_on_exact_laws():
    gen = torch.Generator().manual_seed(3)
    count, vocab = 40, 10
    p = torch.softmax(torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2, -1)
    arms = [Arm("sps")]
    arms += [Arm("cactus", d, "kl") for d in (0.05, 0.2, 0.5, 1.0, 2.0)]
    arms += [Arm("lenience", l) for l in (0.9, 0.5, 0.2)]
    arms += [Arm("tas", e) for e in (0.05, 0.2)]
    stats, _ = chunk_statistics(p, q, arms, 100_000)
    sequence = torch.arange(count) // 5
    lengths = torch.full((count // 5,), 5)
    weights = bootstrap_weights(8, 300, seed=1)
    rows = matched_rows(arms, stats, sequence, lengths, weights)
    found = {(r["rule"], r["parameter"], r["statistic"]): r for r in rows}

    beta = stats["beta"].mean(-1).numpy()
    checked = 0
    for f in DIVERGENCES:
        div = stats[f].mean(-1).numpy()
        for rule_b, rule_a in (("cactus", "lenience"), ("cactus", "tas"), ("lenience", "tas")):
            b = [i for i, arm in enumerate(arms) if arm.rule == rule_b and np.isfinite(div[i])]
            for a in (i for i, arm in enumerate(arms) if arm.rule == rule_a):
                expected = None
                if np.isfinite(div[a]) and len(b) >= 2:
                    expected = _reference(beta[a], div[a], beta[b], div[b])
                key = (rule_a, arms[a].parameter, f"matched_{f}_acceptance_vs:{rule_b}")
                if expected is None:
                    assert key not in found
                    continue
                row = found[key]
                assert row["value"] == pytest.approx(expected, abs=1e-12)
                assert row["ci_low"] <= row["value"] + 1e-12
                assert row["value"] - 1e-12 <= row["ci_high"]
                checked += 1
    assert checked >= 5  # the random laws do give matches to check
    # the earlier rule is never matched against the later one (each pair once)
    assert not [r for r in rows if r["rule"] == "cactus" and "vs:lenience" in r["statistic"]]
    assert not [r for r in rows if r["rule"] == "sps"]
