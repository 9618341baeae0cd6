"""2026's rules and the guards on the frontier: the grids build their arms, each arm's exact
statistics are the rule's own law on the whole vocabulary (a valid law), Cactus with stop=exact
keeps q's stop mass at every position, and a guard the frontier cannot place fails in one line."""

import pytest
import torch

from cactus_bench.frontier.arms import Arm, build_arms
from cactus_bench.frontier.conf import FrontierConf, FrontierConfigError
from cactus_bench.frontier.stats import chunk_statistics, stop_first
from cactus_bench.frontier.teacher_forcing import on_support, stop_on_index_space, support_index

pytestmark = pytest.mark.usefixtures("single_thread")
STOP_IDS = (0, 7)  # two stop tokens of a 40-id vocabulary
NEW_RULES = ("topband", "topband_cascade", "additive", "greedy_margin")


def _laws(count: int = 24, vocab: int = 40, seed: int = 3, keep: int = 8):
    """[count, vocab] float64 top-`keep` p and q; q favours the stop ids (q(S) > 0 often)."""
    gen = torch.Generator().manual_seed(seed)
    laws = []
    for bias in (0.0, 1.5):
        logits = torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2
        logits[:, list(STOP_IDS)] += bias
        kth = logits.topk(keep, dim=-1).values[:, -1:]
        laws.append(torch.softmax(torch.where(logits >= kth, logits, -torch.inf), -1))
    return laws


def test_the_default_grid_holds_the_new_rules_and_the_guarded_cactus_arms():
    arms = build_arms(FrontierConf(rules=["cactus", *NEW_RULES], deltas=[0.5, 1.0]))
    labels = [(arm.rule, arm.parameter) for arm in arms]
    assert ("topband", "alpha=0.2") in labels  # the source's alpha
    assert ("topband_cascade", "beta=0.8") in labels
    assert ("additive", "t=0.1") in labels
    assert ("greedy_margin", "K=0.5") in labels
    assert labels[-2:] == [("cactus+stop=exact", "delta=1"), ("cactus+near_top=0.2", "delta=1")]
    guarded = arms[-2].sampler()
    assert guarded.guards.stop == "exact" and guarded.params()["delta"] == 1.0
    assert arms[-1].sampler().guards.near_top == pytest.approx(0.2)
    assert arms[-1].budget_divergence is None  # Cactus's delta no longer bounds the guarded law
    assert build_arms(FrontierConf(rules=["tas"], tas_thresholds=[0.1]))[-1].rule == "tas"


def test_each_new_arm_is_its_rules_law_on_the_vocabulary_and_stop_exact_keeps_q_s():
    p, q = _laws()
    arms = build_arms(
        FrontierConf(rules=["cactus", *NEW_RULES], deltas=[1.0], guard_deltas=[0.5, 2.0])
    )
    stop_row = stop_on_index_space(STOP_IDS, None, 40, p.device)
    index, valid = support_index(p, q)
    p_c, q_c = on_support(p, index, valid), on_support(q, index, valid)
    stats = chunk_statistics(p_c, q_c, arms, 500, stop=stop_row[index] & valid)[0]
    q_stop = q[:, list(STOP_IDS)].sum(-1)
    assert float(q_stop.min()) < 1e-12 < float(q_stop.max())
    for number, arm in enumerate(arms):
        rule = arm.sampler()
        if arm.stop_exact:
            rule.stop_ids = torch.tensor(STOP_IDS)
        beta, law = rule.acceptance_and_law(p, q)  # [C], [C, V] on the whole vocabulary
        assert float(law.min()) >= 0
        torch.testing.assert_close(law.sum(-1), torch.ones(24, dtype=torch.float64))
        torch.testing.assert_close(stats["beta"][number], beta, atol=1e-12, rtol=0)
        law_stop = law[:, list(STOP_IDS)].sum(-1)
        torch.testing.assert_close(stats["stop_mass"][number], law_stop, atol=1e-12, rtol=0)
        head = (law * (q < 0.2 * q.amax(-1, keepdim=True))).sum(-1)
        torch.testing.assert_close(stats["out_of_head"][number], head, atol=1e-12, rtol=0)
        kl = (torch.special.xlogy(law, law) - torch.special.xlogy(law, q)).sum(-1)
        torch.testing.assert_close(stats["kl"][number], kl.clamp(min=0), atol=1e-10, rtol=0)
        if arm.stop_exact:  # G1: q's stop mass, position by position
            torch.testing.assert_close(stats["stop_mass"][number], q_stop, atol=1e-12, rtol=0)
    unguarded = next(i for i, a in enumerate(arms) if a.rule == "cactus")
    assert not torch.allclose(stats["stop_mass"][unguarded], q_stop, atol=1e-6)  # told apart


def test_stop_first_moves_each_rows_stops_to_the_same_columns():
    p = torch.tensor([[0.5, 0.2, 0.3, 0.0], [0.1, 0.6, 0.0, 0.3]], dtype=torch.float64)
    stop = torch.tensor([[False, True, False, False], [True, False, False, True]])
    moved_p, moved_q, moved_stop, width = stop_first(p, p.flip(-1), stop)
    assert width == 2
    assert moved_stop.tolist() == [[True, False] + [False] * 4, [True, True] + [False] * 4]
    assert moved_p.tolist() == [[0.2, 0.0, 0.5, 0.0, 0.3, 0.0], [0.1, 0.3, 0.0, 0.6, 0.0, 0.0]]
    assert moved_q.sum(-1).tolist() == pytest.approx([1.0, 1.0])


def test_an_arm_with_stop_exact_and_no_stop_set_fails_in_one_line():
    p, q = _laws(count=4)
    with pytest.raises(ValueError, match="needs the stop set"):
        chunk_statistics(p, q, [Arm("sps"), Arm("cactus", 1.0, "kl", "stop=exact")], 500)


@pytest.mark.parametrize(
    ("guard", "says"),
    [
        ("strict_first=8", "position"),
        ("relax_in=think", "position"),
        ("stop=maybe", "must be one of"),
        ("near_top=2", "near_top"),
        ("near_top=0", "the default"),
        ("near_top", "near_top"),
    ],
)
def test_a_guard_the_frontier_cannot_place_fails_in_one_line(guard, says):
    with pytest.raises(FrontierConfigError, match=says) as error:
        FrontierConf(guards=[guard]).check()
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("topband_alphas", [1.5]),
        ("topband_betas", [-0.1]),
        ("additive_thresholds", [-1.0]),
        ("greedy_margins", [0.0]),
    ],
)
def test_a_new_rules_grid_out_of_range_fails_in_one_line(field, values):
    with pytest.raises(FrontierConfigError, match=field):
        FrontierConf(**{field: values}).check()


def test_a_position_where_every_draft_is_accepted_emits_p_not_nan():
    # Cactus delta = 1 accepts every draft here (gamma >= p everywhere) and S = {3} has no mass:
    # the guarded rule's residual is zero, and so is SpS's where p = q. Both laws are p.
    p = torch.tensor([[0.4, 0.3, 0.3, 0.0], [0.5, 0.25, 0.25, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.35, 0.35, 0.3, 0.0], [0.5, 0.25, 0.25, 0.0]], dtype=torch.float64)
    stop = torch.tensor([False, False, False, True]).expand(2, 4)
    arms = [Arm("sps"), Arm("cactus", 1.0, "kl", "stop=exact")]
    stats = chunk_statistics(p, q, arms, 500, stop=stop)[0]
    assert stats["beta"][1].tolist() == pytest.approx([1.0, 1.0]) and stats["beta"][0, 1] == 1.0
    assert not torch.isnan(stats["kl"]).any()
    rule = arms[1].sampler()
    rule.stop_ids = torch.tensor([3])
    for _beta, law in (arms[0].sampler().acceptance_and_law(p, q), rule.acceptance_and_law(p, q)):
        torch.testing.assert_close(law[1], p[1])
    torch.testing.assert_close(rule.acceptance_and_law(p, q)[1], p)
