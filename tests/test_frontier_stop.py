"""The frontier's stop and head statistics: each arm's exact law(S), out-of-head mass and entropy
equal the rule's own emitted law on the whole vocabulary; the rows pool them as sum law(S) /
sum q(S) (all positions and at the verifier's stops); older CSVs still plot, marked."""

from pathlib import Path

import pandas as pd
import pytest
import torch

from cactus_bench.frontier.aggregate import bootstrap_weights
from cactus_bench.frontier.arms import Arm, build_arms
from cactus_bench.frontier.conf import RULE_FAMILIES, FrontierConf
from cactus_bench.frontier.plots_stop import STOP_STATISTICS, missing_statistics, stop_figure
from cactus_bench.frontier.rows import stop_rows
from cactus_bench.frontier.stats import chunk_statistics, entropy
from cactus_bench.frontier.teacher_forcing import (
    FullRows,
    on_support,
    stop_on_index_space,
    support_index,
)
from cactus_bench.samplers.exact import normalised

pytestmark = pytest.mark.usefixtures("single_thread")
REPO = Path(__file__).resolve().parents[1]
STOP_IDS = (0, 7)  # two stop tokens of a 40-id vocabulary


def _laws(count: int, vocab: int, seed: int, keep: int = 6):
    """(p, q, p_bar, q_bar) [count, vocab] float64: top-`keep` rows and their untruncated laws;
    the verifier's logits favour the stop ids so that q(S) > 0 at many positions."""
    gen = torch.Generator().manual_seed(seed)
    out, laws = [], []
    for role in range(2):
        logits = torch.randn(count, vocab, generator=gen, dtype=torch.float64) * 2
        if role == 1:
            logits[:, list(STOP_IDS)] += 1.5
        kth = logits.topk(keep, dim=-1).values[:, -1:]
        out.append(torch.softmax(torch.where(logits >= kth, logits, -torch.inf), -1))
        laws.append(torch.softmax(logits, -1))
    return out[0], out[1], laws[0], laws[1]


def test_every_arms_stop_head_and_entropy_equal_its_law_on_the_vocabulary():
    p, q, p_bar, q_bar = _laws(24, 40, seed=5)
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
    )
    arms = build_arms(conf)
    stop_row = stop_on_index_space(STOP_IDS, None, 40, p.device)  # [V] bool
    index, valid = support_index(p, q)
    p_c, q_c = on_support(p, index, valid), on_support(q, index, valid)
    stop_c = stop_row[index] & valid  # as iter_chunks carries it
    full = FullRows(p.float(), q.float(), p_bar.float(), q_bar.float(), stop=stop_row)
    stats = chunk_statistics(p_c, q_c, arms, 2_000, full=full, stop=stop_c, head=0.2)[0]
    as_stored = [*normalised(p.float(), q.float()), *normalised(p_bar.float(), q_bar.float())]
    for number, arm in enumerate(arms):
        if arm.reads_unscaled:
            p_v, q_v, extra = *as_stored[:2], as_stored[2:]
        else:  # the compact rows' laws, laid back on the vocabulary
            p_v, q_v, extra = p, q, ()
        rule = arm.sampler()
        if arm.stop_exact:  # the guard's stop ids index the whole vocabulary here
            rule.stop_ids = torch.tensor(STOP_IDS)
        law = rule.emitted_law(p_v, q_v, *extra)  # [C, V]
        head = q_v < 0.2 * q_v.amax(-1, keepdim=True)
        expected = {
            "stop_mass": law[:, list(STOP_IDS)].sum(-1),
            "out_of_head": (law * head).sum(-1),
            "emitted_entropy": entropy(law),
        }
        for name, value in expected.items():
            torch.testing.assert_close(stats[name][number], value, atol=1e-10, rtol=0)
    sps = stats["stop_mass"][0]  # sps emits q: its stop mass is q's
    torch.testing.assert_close(sps, q[:, list(STOP_IDS)].sum(-1), atol=1e-12, rtol=0)
    assert float(q[:, list(STOP_IDS)].sum(-1).min()) < 1e-12 < float(sps.max())  # both kinds


def test_without_a_stop_set_the_stop_mass_is_missing_but_the_head_is_not():
    p, q, _, _ = _laws(10, 40, seed=6)
    stats = chunk_statistics(p, q, [Arm("sps"), Arm("cactus", 1.0, "kl")], 10_000)[0]
    assert torch.isnan(stats["stop_mass"]).all()
    assert not torch.isnan(stats["out_of_head"]).any()
    assert not torch.isnan(stats["emitted_entropy"]).any()


def test_stop_ids_map_through_the_token_map_onto_the_index_space():
    row = stop_on_index_space((2, 0, 99), None, 10, torch.device("cpu"))
    assert row.nonzero().flatten().tolist() == [0, 2]  # 99 is beyond the logits
    token_map = torch.tensor([5, 2, 9, 0])  # index space entry i is vocabulary id token_map[i]
    row = stop_on_index_space((0, 2), token_map, 4, torch.device("cpu"))
    assert row.tolist() == [False, True, False, True]


def _stop_measured(seed=8):
    p, q, _, _ = _laws(30, 40, seed=seed)
    arms = [Arm("sps"), Arm("cactus", 1.0, "kl"), Arm("tas", 0.3)]
    stop = stop_on_index_space(STOP_IDS, None, 40, p.device).expand_as(q)
    stats = chunk_statistics(p, q, arms, 100_000, stop=stop)[0]
    q_stop = q[:, list(STOP_IDS)].sum(-1)
    head = q < 0.2 * q.amax(-1, keepdim=True)
    verifier = {"stop_mass": q_stop, "out_of_head": (q * head).sum(-1), "entropy": entropy(q)}
    sequence = torch.arange(30) // 5  # 6 sequences of 5 positions, each ending in a stop
    at_stop = torch.arange(30) % 5 == 4
    return arms, stats, verifier, at_stop, sequence, torch.full((6,), 5)


def test_stop_rows_pool_law_s_over_q_s_and_restrict_to_the_stops():
    arms, stats, verifier, at_stop, sequence, lengths = _stop_measured()
    rows = stop_rows(
        arms, stats, verifier, at_stop, sequence, lengths, bootstrap_weights(6, 200, 0)
    )
    found = {(r["rule"], r["statistic"]): r for r in rows}
    q_stop = verifier["stop_mass"]
    for number, arm in enumerate(arms):
        law_stop = stats["stop_mass"][number]
        ratio = found[(arm.rule, "stop_mass_ratio")]
        assert ratio["value"] == pytest.approx(float(law_stop.sum() / q_stop.sum()))
        assert ratio["ci_low"] <= ratio["value"] <= ratio["ci_high"]
        at = found[(arm.rule, "stop_mass_ratio@stop")]
        assert at["value"] == pytest.approx(float(law_stop[at_stop].sum() / q_stop[at_stop].sum()))
        assert at["n_positions"] == 6
        head = found[(arm.rule, "out_of_head_per_1000")]["value"]
        assert head == pytest.approx(1000 * float(stats["out_of_head"][number].mean()))
        paired = found[(arm.rule, "emitted_entropy_vs_q")]["value"]
        expected = float((stats["emitted_entropy"][number] - verifier["entropy"]).mean())
        assert paired == pytest.approx(expected, abs=1e-12)
    assert found[("sps", "stop_mass_ratio")]["value"] == pytest.approx(1.0, abs=1e-12)
    assert found[("sps", "out_of_head_per_1000_vs_q")]["value"] == pytest.approx(0.0, abs=1e-9)
    own = found[("verifier", "out_of_head_per_1000")]["value"]
    assert own == pytest.approx(1000 * float(verifier["out_of_head"].mean()))
    assert found[("verifier", "stop_positions")]["value"] == 6
    # Cactus's law moves mass off q's stops here: not a property of every input, so the test
    # asserts only that the rule is told apart from SpS.
    assert found[("cactus", "stop_mass_ratio")]["value"] != pytest.approx(1.0, abs=1e-6)


def test_no_stop_set_gives_no_stop_rows():
    arms, stats, verifier, at_stop, sequence, lengths = _stop_measured()
    stats = {**stats, "stop_mass": torch.full_like(stats["stop_mass"], torch.nan)}
    verifier = {**verifier, "stop_mass": torch.full_like(verifier["stop_mass"], torch.nan)}
    rows = stop_rows(arms, stats, verifier, at_stop, sequence, lengths, bootstrap_weights(6, 50, 0))
    statistics = {r["statistic"] for r in rows}
    assert not any(name.startswith("stop_mass") for name in statistics)
    assert {"out_of_head_per_1000", "emitted_entropy", "emitted_entropy_vs_q"} <= statistics


@pytest.mark.parametrize("name", ["smollm2_135m.csv", "smollm2_135m__drafter_train.csv"])
def test_committed_csvs_written_before_the_stop_rows_say_so_and_draw_no_stop_figure(name):
    frame = pd.read_csv(REPO / "results" / "frontier" / name, keep_default_na=False, na_values=[""])
    frame["parameter"] = frame.parameter.fillna("").astype(str)
    if not missing_statistics(frame):
        pytest.skip(f"{name} was regenerated with the stop rows")
    assert missing_statistics(frame) == list(STOP_STATISTICS)
    assert stop_figure(frame) is None


def test_chunks_carry_the_stop_set_onto_each_rows_support():
    """iter_chunks lays S onto each position's compact support (and onto the full rows): q's
    mass on the marked entries equals q_t(S) from the verifier's own logits."""
    from cactus_bench.engine import SamplingParams, process_logits
    from cactus_bench.frontier.contexts import Contexts
    from cactus_bench.frontier.teacher_forcing import answer_logits, iter_chunks
    from cactus_bench.models import load_pair
    from cactus_bench.tasks.stop_set import stop_set

    pair = load_pair("tiny_random")
    stops = stop_set(pair.tokenizer).stop_ids
    gen = torch.Generator().manual_seed(0)
    answers = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (9, 14, 6)]
    answers[0][-1] = stops[0]  # a verifier's stop as the last token
    prompts = [[104, 105, 32], [72, 101], [87]]
    contexts = Contexts(prompts, answers, ["demo"] * 3)
    sampling = SamplingParams(1.0, 1.0, 40)  # top-40 of 288 ids: supports differ per row
    chunks = list(iter_chunks(pair, contexts, sampling, 400, 1, False, True, stops))
    assert len(chunks) > 1  # a chunk boundary inside the answers
    got = torch.cat([(chunk.q * chunk.stop).sum(-1) for chunk in chunks])
    full = torch.cat([(chunk.full.q.double() * chunk.full.stop).sum(-1) for chunk in chunks])
    expected = []
    for prompt, answer in zip(prompts, answers, strict=True):
        q = process_logits(answer_logits(pair.verifier, prompt, answer, pair.token_map), sampling)
        q = q.double() / q.double().sum(-1, keepdim=True)
        expected.append(q[:, list(stops)].sum(-1))
    expected = torch.cat(expected)
    assert int((expected > 0).sum()) >= 3 and int((expected == 0).sum()) >= 3  # both kinds
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(full, expected, atol=1e-6, rtol=0)


def test_the_committed_subset_run_has_every_stop_statistic_and_draws_its_figure():
    csv = REPO / "results" / "frontier" / "subset_ifeval32" / "smollm2_135m.csv"
    frame = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    frame["parameter"] = frame.parameter.fillna("").astype(str)
    assert missing_statistics(frame) == []
    assert set(frame.prompt_set) == {"held_out:ifeval32"}
    ratio = frame[frame.statistic == "stop_mass_ratio"].set_index(["rule", "parameter"]).value
    assert ratio[("sps", "")] == pytest.approx(1.0, abs=1e-9)
    assert stop_figure(frame) is not None


def test_a_rule_without_a_grid_here_runs_as_one_arm_at_its_defaults():
    # A rule file added to the catalogue reaches the frontier without an edit of arms.py: no
    # grid there, one arm at the rule's defaults (as greedy), and every statistic above applies.
    conf = FrontierConf(rules=["cactus", "greedy", "a_new_rule"], deltas=[1.0], guards=[])
    arms = build_arms(conf)
    assert [(arm.family, arm.parameter) for arm in arms] == [
        ("sps", ""),
        ("cactus", "delta=1"),
        ("greedy", ""),
        ("a_new_rule", ""),
    ]
