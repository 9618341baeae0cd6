"""The frontier's pieces: configuration, support compaction, per-arm exact statistics, the
bootstrap, predicted AL against a direct simulation, the CSV rows."""

import math

import pytest
import torch

from cactus_bench.frontier.aggregate import (
    bin_label,
    bootstrap_weights,
    entropy_bins,
    per_sequence_sums,
    ratio_estimate,
)
from cactus_bench.frontier.al import expected_steps_and_accepts, simulate_al
from cactus_bench.frontier.arms import Arm, build_arms
from cactus_bench.frontier.conf import (
    DEFAULT_DELTAS,
    RULE_FAMILIES,
    FrontierConf,
    FrontierConfigError,
)
from cactus_bench.frontier.stats import chunk_statistics, entropy
from cactus_bench.frontier.teacher_forcing import FullRows, compact_support
from cactus_bench.samplers import binary_divergence, full_divergence, make_sampler, taylor_gamma
from cactus_bench.samplers.exact import normalised

pytestmark = pytest.mark.usefixtures("single_thread")


def _rows(count: int, vocab: int, seed: int, keep: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-`keep` truncated p and q rows (float64, normalised), as process_logits makes them."""
    p, q, _, _ = _rows_and_laws(count, vocab, seed, keep)
    return p, q


def _rows_and_laws(count: int, vocab: int, seed: int, keep: int = 6):
    """(p, q, p_bar, q_bar): truncated rows and the temperature-1 untruncated laws they come
    from (all [count, vocab] float64)."""
    gen = torch.Generator().manual_seed(seed)
    out, laws = [], []
    for _ in range(2):
        logits = torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2
        kth = logits.topk(keep, dim=-1).values[:, -1:]
        probs = torch.softmax(torch.where(logits >= kth, logits, -torch.inf), -1)
        out.append(probs)
        laws.append(torch.softmax(logits, -1))
    return out[0], out[1], laws[0], laws[1]


# ---- configuration ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rules": ["medusa"]}, "unknown frontier.rules entry 'medusa'"),
        ({"deltas": []}, "frontier.deltas is empty"),
        ({"deltas": [0.5, -0.1]}, "frontier.deltas must hold values >= 0"),
        ({"tas_thresholds": [1.5]}, "frontier.tas_thresholds must hold values in"),
        ({"topk_ks": [0]}, "frontier.topk_ks must hold values integers >= 1"),
        ({"divergences": ["js"]}, "unknown frontier.divergences entry 'js'"),
        ({"prompts": ["gsm8k"]}, "unknown frontier.prompts entry"),
        ({"num_demo": 0, "prompts": ["demo"]}, "selects no prompt"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"entropy_edges": [0.0, 1.0, 0.5]}, "entropy_edges must be"),
        ({"max_new_tokens": 0}, "max_new_tokens must be an integer >= 1"),
    ],
)
def test_bad_settings_fail_in_one_line(change, message):
    with pytest.raises(FrontierConfigError, match=message) as caught:
        FrontierConf(**change).check()
    assert "\n" not in str(caught.value)


def test_default_grid_is_log_spaced_from_001_to_8_with_the_named_budgets():
    deltas = list(DEFAULT_DELTAS)
    assert deltas[0] == 0.01 and deltas[-1] == 8.0
    assert {0.25, 0.5, 0.75, 1.0, 2.0} <= set(deltas)
    ratios = [b / a for a, b in zip(deltas, deltas[1:], strict=False)]
    assert max(ratios) <= 2.0  # roughly log-spaced: no gap wider than a factor 2
    FrontierConf().check()
    assert FrontierConf().prompt_set_name() == "held_out:demo20+gsm8k_test60+ifeval40"
    second = FrontierConf(prompts=["gsm8k_train"], num_gsm8k=108)
    assert second.prompt_set_name() == "drafter_train:gsm8k_train108"
    assert second.csv_name() == "smollm2_135m__drafter_train.csv"


def test_arms_cover_the_grid_with_sps_first():
    conf = FrontierConf(
        deltas=[0.5, 1.0],
        divergences=["kl", "tv"],
        tas_thresholds=[0.09],
        topk_ks=[5],
        interp_alphas=[0.5],
        rules=["sps", "cactus", "cactus_exact", "tas", "topk", "interp"],
    )
    arms = build_arms(conf)
    assert arms[0] == Arm("sps")
    assert [(a.rule, a.parameter) for a in arms[1:4]] == [
        ("cactus", "delta=0.5"),
        ("cactus", "delta=1"),
        ("cactus_exact:kl", "delta=0.5"),
    ]
    assert len(arms) == 1 + 2 + 4 + 1 + 1 + 1 + 2  # + Cactus delta=1 with each default guard
    assert [a.rule for a in arms[-2:]] == ["cactus+stop=exact", "cactus+near_top=0.2"]
    assert {a.parameter for a in arms if a.family in ("tas", "topk", "interp")} == {
        "eps=0.09",
        "k=5",
        "alpha=0.5",
    }


# ---- support compaction and per-arm statistics ---------------------------------------------------
def test_compact_support_keeps_every_mass_in_id_order():
    p, q = _rows(30, 50, seed=0)
    p_c, q_c = compact_support(p, q)
    assert p_c.shape[1] <= 12
    torch.testing.assert_close(p_c.sum(-1), torch.ones(30, dtype=torch.float64))
    for row in range(30):
        support = ((p[row] > 0) | (q[row] > 0)).nonzero().squeeze(-1)  # ascending ids
        width = support.numel()
        torch.testing.assert_close(p_c[row, :width], p[row, support])
        torch.testing.assert_close(q_c[row, :width], q[row, support])
        assert torch.all(p_c[row, width:] == 0) and torch.all(q_c[row, width:] == 0)


def test_statistics_on_the_compact_support_equal_the_full_vocabulary():
    """Every arm's statistics from a chunk (compact rows, and full rows with the temperature-1
    laws for the rules whose test reads them) equal the rule's own functions on the whole
    vocabulary, with those laws."""
    p, q, p_bar, q_bar = _rows_and_laws(20, 40, seed=1)
    conf = FrontierConf(
        deltas=[0.3, 2.0],
        tas_thresholds=[0.3],
        topk_ks=[2],
        interp_alphas=[0.4],
        lenience_ls=[0.5],
        cascade_alphas=[0.3],
        fsd_thresholds=[0.2],
        bild_taus=[2.0],
        rules=[rule for rule in RULE_FAMILIES if rule != "sps"],
        guards=["near_top=0.2"],  # stop=exact needs a stop set (tests/test_frontier_new_arms.py)
    )
    arms = build_arms(conf)
    assert {arm.family for arm in arms} == set(RULE_FAMILIES)
    assert {arm.family for arm in arms if arm.reads_unscaled} == {
        "chow", "diff", "opt", "tokenv1", "tokenv2", "tokenv3", "fsd", "fsd_reducible",
        "fsd_unsmoothed", "bild",
    }  # fmt: skip
    p_c, q_c = compact_support(p, q)
    full = FullRows(p.float(), q.float(), p_bar.float(), q_bar.float())
    compact = chunk_statistics(p_c, q_c, arms, chunk_elements=10_000, full=full)[0]
    # FullRows is float32: the statistics read its rows normalised again in float64
    as_stored = [*normalised(p.float(), q.float()), *normalised(p_bar.float(), q_bar.float())]
    told_apart = set()
    for index, arm in enumerate(arms):
        rule = arm.sampler()
        if arm.reads_unscaled:
            p, q, laws = *as_stored[:2], as_stored[2:]
        else:
            p, q, laws = p_c, q_c, ()
        beta = rule.acceptance_probability(p, q, *laws)
        law = rule.emitted_law(p, q, *laws)
        torch.testing.assert_close(compact["beta"][index], beta, atol=1e-11, rtol=0)
        torch.testing.assert_close(
            compact["tv"][index], full_divergence(law, q, "tv"), atol=1e-11, rtol=0
        )
        kl = full_divergence(law, q, "kl").clamp(min=0)
        assert torch.equal(torch.isinf(compact["kl"][index]), torch.isinf(kl))
        finite = torch.isfinite(kl)
        torch.testing.assert_close(compact["kl"][index][finite], kl[finite], atol=1e-10, rtol=0)
        torch.testing.assert_close(compact["q_zero_mass"][index], (law * (q == 0)).sum(-1))
        if arm.reads_unscaled:
            processed = make_sampler(arm.family, **{**rule.params(), "test_law": "processed"})
            if not torch.allclose(compact["beta"][index], processed.acceptance_probability(p, q)):
                told_apart.add(arm.family)
    assert len(told_apart) >= 3, told_apart  # BiLD, TokenV1, TokenV2 read them apart here


def test_a_law_outside_the_union_support_is_measured_on_the_full_rows(monkeypatch):
    """The full-row arms take their divergences on the union support of p and q; a rule whose
    residual spreads mass beyond it (uniform here) must still get KL = inf and its q-zero mass."""
    from cactus_bench.samplers.kernel import PlanRule
    from cactus_bench.samplers.rules.bild import Bild

    class UniformResidual(Bild):
        def plan(self, p, q, p_bar, q_bar):
            accept, _ = super().plan(p, q, p_bar, q_bar)
            return accept, torch.ones_like(q)

    p, q, p_bar, q_bar = _rows_and_laws(12, 30, seed=3)
    p_c, q_c = compact_support(p, q)
    full = FullRows(p.float(), q.float(), p_bar.float(), q_bar.float())
    monkeypatch.setattr(Arm, "sampler", lambda arm: PlanRule(UniformResidual(tau=arm.value)))
    stats = chunk_statistics(p_c, q_c, [Arm("bild", 0.5)], chunk_elements=120, full=full)[0]
    laws = [*normalised(p.float(), q.float()), *normalised(p_bar.float(), q_bar.float())]
    law = PlanRule(UniformResidual(tau=0.5)).emitted_law(*laws)
    outside = (law * (laws[1] == 0)).sum(-1)
    assert float(outside.min()) > 0  # every row puts mass where q = 0
    torch.testing.assert_close(stats["q_zero_mass"][0], outside, atol=1e-12, rtol=0)
    assert torch.isinf(stats["kl"][0]).all()
    torch.testing.assert_close(
        stats["tv"][0], full_divergence(law, laws[1], "tv"), atol=1e-12, rtol=0
    )


def test_taylor_overshoot_statistics_match_a_loop_over_drafts():
    p, q = _rows(25, 30, seed=2, keep=4)
    delta = 0.5
    arms = [Arm("sps"), Arm("cactus", delta, "kl"), Arm("cactus_exact", delta, "kl")]
    stats = chunk_statistics(p, q, arms, chunk_elements=1_000)[0]  # several row blocks
    for row in range(25):
        share = excess = 0.0
        broken = False
        for n in range(30):
            if p[row, n] == 0:
                continue
            gamma = taylor_gamma(q[row, n : n + 1], delta)
            kl = binary_divergence(gamma, q[row, n : n + 1], "kl").item()
            if kl > delta * (1 + 1e-9) + 1e-12:
                share += p[row, n].item()
                excess += p[row, n].item() * (kl - delta)
                broken = True
        assert stats["exceed"][1, row].item() == pytest.approx(share, abs=1e-12)
        assert stats["excess"][1, row].item() == pytest.approx(excess, abs=1e-12)
        assert stats["exceed_any"][1, row].item() == float(broken)
    assert float(stats["exceed"][1].sum()) > 0  # the Taylor rule does break the budget here
    assert float(stats["exceed"][2].abs().max()) == 0  # the exact rule never does
    assert torch.isnan(stats["exceed"][0]).all()  # SpS has no budget


def test_target_rules_sit_on_the_coupling_bound_in_tv():
    """For every target rule TV(law, q) = beta - beta_SpS exactly: the acceptance gained
    equals the TV it costs (the coupling bound beta <= beta_SpS + TV(law, q) is tight);
    TAS, top-k and greedy pay more TV than they gain."""
    p, q = _rows(30, 40, seed=3)
    old_rules = ["cactus", "cactus_exact", "tas", "topk", "interp"]
    conf = FrontierConf(
        deltas=[0.1, 1.0],
        tas_thresholds=[0.09],
        topk_ks=[3],
        interp_alphas=[0.5],
        rules=old_rules,
        guards=[],
    )
    arms = build_arms(conf)
    stats = chunk_statistics(p, q, arms, chunk_elements=100_000)[0]
    gain = stats["beta"] - stats["beta"][0:1]
    for index, arm in enumerate(arms):
        if arm.family in ("sps", "cactus", "cactus_exact", "interp"):
            torch.testing.assert_close(stats["tv"][index], gain[index], atol=1e-12, rtol=0)
        else:
            assert torch.all(stats["tv"][index] >= gain[index] - 1e-12)
            assert bool((stats["tv"][index] > gain[index] + 1e-6).any())


def test_entropy_and_bins():
    q = torch.tensor([[1.0, 0.0], [0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(entropy(q), torch.tensor([0.0, math.log(2)], dtype=torch.float64))
    edges = [0.0, 0.5, 1.0]
    bins = entropy_bins(torch.tensor([0.0, 0.49, 0.5, 0.99, 1.0, 3.0]), edges)
    assert bins.tolist() == [0, 0, 1, 1, 1, 1]  # the last bin is closed and takes the rest
    assert bin_label(edges, 0) == "[0,0.5)" and bin_label(edges, 1) == "[0.5,1]"


# ---- the bootstrap ------------------------------------------------------------------------------
def test_ratio_estimate_is_the_pooled_mean_and_pairs_replicates():
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], dtype=torch.float64)
    sequence = torch.tensor([0, 0, 1, 1, 1, 2])
    sums = per_sequence_sums(values, sequence, 3)
    counts = per_sequence_sums(torch.ones(6, dtype=torch.float64), sequence, 3)
    assert sums.tolist() == [[3.0, 12.0, 6.0]] and counts.tolist() == [2.0, 3.0, 1.0]
    weights = bootstrap_weights(3, 500, seed=0)
    assert weights.shape == (500, 3) and torch.all(weights.sum(-1) == 3)
    estimate = ratio_estimate(sums, counts, weights)
    assert estimate.value.item() == pytest.approx(3.5)
    assert estimate.low.item() < 3.5 < estimate.high.item()
    constant = ratio_estimate(torch.full((1, 3), 2.0), torch.ones(3), weights)
    assert constant.low.item() == constant.high.item() == 2.0


def test_bootstrap_interval_covers_about_95_percent():
    """Means of 40 sequences of dependent positions: the interval over sequences covers the
    true mean in ~95 % of 200 data sets (fixed seeds; 0.90-0.99 leaves room for the bootstrap's
    known slight under-coverage at this size)."""
    gen = torch.Generator().manual_seed(5)
    covered = 0
    for trial in range(200):
        level = torch.rand(40, generator=gen, dtype=torch.float64)  # sequence effect, mean 0.5
        lengths = torch.randint(5, 30, (40,), generator=gen)
        sequence = torch.repeat_interleave(torch.arange(40), lengths)
        noise = torch.rand(int(lengths.sum()), generator=gen, dtype=torch.float64) - 0.5
        values = (level[sequence] + noise)[None]
        counts = lengths.double()
        weights = bootstrap_weights(40, 300, seed=trial)
        estimate = ratio_estimate(per_sequence_sums(values, sequence, 40), counts, weights)
        covered += bool(estimate.low.item() <= 0.5 <= estimate.high.item())
    assert 0.90 <= covered / 200 <= 0.99


def test_infinite_values_make_the_mean_infinite():
    sums = torch.tensor([[1.0, torch.inf, 2.0]], dtype=torch.float64)
    estimate = ratio_estimate(sums, torch.ones(3), bootstrap_weights(3, 200, seed=1))
    assert math.isinf(estimate.value.item()) and math.isinf(estimate.high.item())


# ---- predicted AL -------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 3, 7])
def test_predicted_al_matches_a_direct_simulation(m):
    gen = torch.Generator().manual_seed(m)
    beta = torch.rand(23, generator=gen, dtype=torch.float64) ** 0.5  # one known sequence
    accepted, steps = expected_steps_and_accepts(beta[None, None], torch.tensor([23]), max_m=m)
    sim_accepted, sim_steps = simulate_al(beta.tolist(), m, runs=40_000, seed=11)
    predicted = accepted[m - 1, 0, 0].item() / steps[m - 1, 0, 0].item()
    assert predicted == pytest.approx(sim_accepted / sim_steps, abs=0.01)
    assert steps[m - 1, 0, 0].item() == pytest.approx(sim_steps / 40_000, rel=0.01)


def test_predicted_al_limits():
    lengths = torch.tensor([200, 200, 200])
    beta = torch.stack([torch.zeros(200), torch.ones(200), torch.full((200,), 0.6)])[None]
    accepted, steps = expected_steps_and_accepts(beta.double(), lengths, max_m=5)
    al = accepted / steps  # [M, 1, 3]
    assert torch.all(al[:, 0, 0] == 0)  # nothing accepted: AL 0 for every m
    for m in range(1, 6):
        # all accepted: each step covers m drafts + the bonus, the last one what is left
        steps = math.ceil(200 / (m + 1))
        assert al[m - 1, 0, 1].item() == pytest.approx((200 - steps) / steps, abs=1e-12)
        geometric = sum(0.6**j for j in range(1, m + 1))  # E[accepted] per step, i.i.d. beta
        assert al[m - 1, 0, 2].item() == pytest.approx(geometric, rel=0.02)


def test_a_rule_with_higher_beta_has_higher_predicted_al():
    p, q = _rows(60, 30, seed=6)
    arms = [Arm("sps"), Arm("cactus", 1.0, "kl")]
    beta = chunk_statistics(p, q, arms, 100_000)[0]["beta"].view(2, 3, 20)
    accepted, steps = expected_steps_and_accepts(beta, torch.tensor([20, 20, 20]), max_m=4)
    al = accepted.sum(-1) / steps.sum(-1)  # [M, 2]
    assert torch.all(al[:, 1] > al[:, 0])


def test_summary_rows_split_by_prompt_source():
    from cactus_bench.frontier.aggregate import bootstrap_weights
    from cactus_bench.frontier.rows import summary_rows

    p, q = _rows(12, 10, seed=7)
    arms = [Arm("sps"), Arm("cactus", 1.0, "kl")]
    stats = chunk_statistics(p, q, arms, 100_000)[0]
    sequence = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3])
    lengths = torch.tensor([3, 2, 4, 3])
    conf = FrontierConf(al_max_m=2)
    rows = summary_rows(
        conf,
        arms,
        stats,
        entropy(q),
        sequence,
        lengths,
        bootstrap_weights(4, 50, seed=0),
        ["demo", "gsm8k_train", "demo", "gsm8k_train"],
        progress=False,
    )
    found = {(r["rule"], r["statistic"]): r for r in rows}
    demo = torch.tensor([0, 2])[:, None] == sequence[None]  # positions of sequences 0 and 2
    expected = stats["beta"][1][demo.any(0)].mean().item()
    row = found[("cactus", "acceptance@source=demo")]
    assert row["value"] == pytest.approx(expected) and row["n_positions"] == 7
    assert ("sps", "gain@source=demo") not in found
    assert found[("cactus", "gain@source=gsm8k_train")]["n_positions"] == 5


def test_predicted_al_of_a_batch_equals_each_sequence_alone():
    gen = torch.Generator().manual_seed(8)
    beta = torch.rand(3, 6, 30, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([30, 4, 17, 1, 30, 9])
    accepted, steps = expected_steps_and_accepts(beta, lengths, max_m=5)
    for s in range(6):
        alone = expected_steps_and_accepts(beta[:, s : s + 1, : lengths[s]], lengths[s : s + 1], 5)
        torch.testing.assert_close(accepted[:, :, s : s + 1], alone[0], atol=1e-12, rtol=0)
        torch.testing.assert_close(steps[:, :, s : s + 1], alone[1], atol=1e-12, rtol=0)
    assert torch.all(steps[:, :, 3] == 1) and torch.all(accepted[:, :, 3] == 0)  # one token


def test_frontier_names_match_the_samplers():
    from cactus_bench.frontier.conf import DIVERGENCE_NAMES, RULE_FAMILIES
    from cactus_bench.samplers import DIVERGENCES, SAMPLERS

    assert tuple(DIVERGENCE_NAMES) == tuple(DIVERGENCES)
    assert set(RULE_FAMILIES) <= set(SAMPLERS)


# ---- frontier v2: distributions, Theorem 3, overshoot cells, paired rows ---------------------
def _measured(arms, count=24, vocab=12, seed=11):
    p, q = _rows(count, vocab, seed=seed, keep=4)
    stats, cells = chunk_statistics(p, q, arms, 100_000)
    sequence = torch.arange(count) // 4  # 6 sequences of 4 positions
    return p, q, stats, cells, sequence, torch.full((count // 4,), 4)


def test_distribution_rows_are_the_quantiles_max_and_share_above_delta():
    from cactus_bench.frontier.distribution import distribution_rows

    arms = [Arm("sps"), Arm("cactus", 0.3, "kl"), Arm("mentored", 0.05)]
    p, q, stats, _, sequence, lengths = _measured(arms)
    rows = distribution_rows(arms, stats, sequence, lengths, bootstrap_weights(6, 50, seed=0))
    found = {(r["rule"], r["statistic"]): r for r in rows}
    for index, arm in enumerate(arms):
        values = stats["reverse_kl"][index]
        finite = values[torch.isfinite(values)]
        if len(finite) == len(values):
            q90 = found[(arm.rule, "reverse_kl_q90")]["value"]
            assert q90 == pytest.approx(torch.quantile(values, 0.9).item())
        assert found[(arm.rule, "reverse_kl_max")]["value"] == values.max().item()
    above = (stats["kl"][1] > 0.3 * (1 + 1e-9) + 1e-12).double().mean().item()
    assert found[("cactus", "kl_share_above_delta")]["value"] == pytest.approx(above)
    # mentored spends exactly its budget on KL(q || law): never above it
    assert found[("mentored", "reverse_kl_share_above_delta")]["value"] == 0.0
    assert ("sps", "kl_share_above_delta") not in found  # no budget


def test_theorem3_excess_is_the_emitted_minus_the_drafter_divergence():
    from cactus_bench.frontier.distribution import distribution_rows, theorem3_findings

    arms = [Arm("sps"), Arm("cactus", 2.0, "kl"), Arm("cactus_exact", 0.5, "chi2")]
    p, q, stats, _, sequence, lengths = _measured(arms)
    for index, f in ((1, "kl"), (2, "chi2")):
        law = arms[index].sampler().emitted_law(p, q)
        own, bound = full_divergence(law, q, f), full_divergence(p, q, f)
        expected = torch.where(own == bound, torch.zeros_like(own), own - bound)
        torch.testing.assert_close(stats["thm3_excess"][index], expected, atol=1e-9, rtol=0)
    assert torch.isnan(stats["thm3_excess"][0]).all()
    rows = distribution_rows(arms, stats, sequence, lengths, bootstrap_weights(6, 50, seed=0))
    fake = rows + [
        {"rule": "x", "parameter": "d", "statistic": "thm3_violation_share", "value": 0.25},
        {"rule": "x", "parameter": "d", "statistic": "thm3_max_excess", "value": 0.5},
    ]
    lines = theorem3_findings(fake)
    assert lines[-1].startswith("finding: x d: D_f(law || q) > D_f(p || q) at 25.00% of positions")


def test_overshoot_cells_sum_to_the_draft_mass_and_the_overshoot():
    from cactus_bench.frontier.distribution import overshoot_cell_rows

    arms = [Arm("sps"), Arm("cactus", 0.5, "kl"), Arm("cactus_exact", 0.5, "kl")]
    p, q, stats, cells, _, _ = _measured(arms, seed=2)
    assert cells[1, ..., 0].sum().item() == pytest.approx(p.shape[0])  # sum_t sum_n p_t(n)
    assert cells[1, ..., 1].sum().item() == pytest.approx(stats["exceed"][1].sum().item())
    assert cells[1, :, 0, 1].sum().item() == 0  # gamma <= 1/2: Taylor keeps KL <= delta
    assert cells[2, ..., 1].sum().item() == 0  # the exact rule never overshoots
    rows = overshoot_cell_rows(arms, cells)
    masses = [r["value"] for r in rows if r["rule"] == "cactus" and "draft_mass" in r["statistic"]]
    assert sum(masses) == pytest.approx(1.0)
    assert not [r for r in rows if r["rule"] == "sps"]


def test_paired_rows_are_mean_differences_at_the_same_delta():
    from cactus_bench.frontier.distribution import paired_rows

    arms = [
        Arm("sps"),
        Arm("cactus", 0.5, "kl"),
        Arm("cactus_exact", 0.5, "kl"),
        Arm("cactus_exact", 0.5, "reverse_kl"),
        Arm("mentored", 0.5),
    ]
    _, _, stats, _, sequence, lengths = _measured(arms)
    rows = paired_rows(arms, stats, sequence, lengths, bootstrap_weights(6, 200, seed=0))
    found = {(r["rule"], r["statistic"]): r for r in rows}
    row = found[("cactus_exact:kl", "paired_acceptance_vs:cactus")]
    assert row["value"] == pytest.approx((stats["beta"][2] - stats["beta"][1]).mean().item())
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    assert ("mentored", "paired_acceptance_vs:cactus_exact:reverse_kl") in found
