"""The feature-head pilot's plumbing on a tiny random pair: cached features and laws, the head's
position alignment, batched vs exact acceptance, the acceptance measure itself, resumable
training."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import DynamicCache

from cactus_bench.drafter_training.distill import subset_lookup
from cactus_bench.drafter_training.shards import load_shards
from cactus_bench.engine.sampling import PAPER_SAMPLING, process_logits
from cactus_bench.feature_drafter import acceptance as acc
from cactus_bench.feature_drafter.collect import CollectSettings, collect_shards
from cactus_bench.feature_drafter.head import FeatureHead
from cactus_bench.feature_drafter.report import GO_THRESHOLD, decision
from cactus_bench.feature_drafter.train import HeadSettings, train_head, val_acceptance
from cactus_bench.models import make_tiny_pair

pytestmark = pytest.mark.usefixtures("single_thread")
PROMPTS = [("math", f"What is {i} plus {2 * i + 1}?") for i in range(10)]


@pytest.fixture(scope="module")
def pair():
    drafter, verifier, tokenizer = make_tiny_pair(seed=3, arch="llama")
    verifier.requires_grad_(False)
    return drafter, verifier, tokenizer


@pytest.fixture(scope="module")
def records(pair, tmp_path_factory):
    _, verifier, tokenizer = pair
    run_dir = tmp_path_factory.mktemp("collect")
    settings = CollectSettings(max_new_tokens=10, batch_size=4)
    collect_shards(verifier, tokenizer, PROMPTS, run_dir, settings, 10**9, lambda _: None)
    return load_shards(run_dir)[0]


def copy_head(verifier) -> FeatureHead:
    """A head whose output is the verifier's law at the feature it reads: fc passes f_i on, the
    decoder layer writes nothing to the residual stream, and the norms are identities (the tiny
    verifier's norm weights are ones, so its features have unit rms)."""
    assert torch.equal(verifier.model.norm.weight, torch.ones_like(verifier.model.norm.weight))
    hidden = verifier.config.hidden_size
    head = FeatureHead(verifier, torch.arange(verifier.config.vocab_size))
    with torch.no_grad():
        head.fc.weight.zero_()
        head.fc.bias.zero_()
        head.fc.weight[:, hidden:] = torch.eye(hidden)
        layer = head.body.model.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    return head.eval()


def test_collected_features_and_laws_match_a_full_forward(pair, records):
    _, verifier, _ = pair
    assert len(records) == len(PROMPTS)
    for r in records:
        seq = r["ids"][None].long()
        assert r["features"].shape == (len(r["ids"]) - 1, verifier.config.hidden_size)
        assert r["q_idx"].shape == (len(r["ids"]) - r["prompt_len"], PAPER_SAMPLING.top_k)
        with torch.no_grad():
            hidden = verifier.model(input_ids=seq[:, :-1]).last_hidden_state[0]  # [S - 1, H]
        torch.testing.assert_close(r["features"].float(), hidden, atol=2e-3, rtol=1e-3)
        q = process_logits(verifier.lm_head(hidden[r["prompt_len"] - 1 :]), PAPER_SAMPLING)
        torch.testing.assert_close(
            q.gather(-1, r["q_idx"].long()), r["q_prob"], atol=1e-5, rtol=1e-4
        )
        torch.testing.assert_close(r["q_prob"].sum(-1), torch.ones(len(r["q_idx"])))
        # Every answer token was sampled from the law cached for it.
        answer = r["ids"][r["prompt_len"] :].long()
        assert bool((q.gather(-1, answer[:, None]) > 0).all())


def test_independent_drafter_equal_to_the_verifier_is_always_accepted(pair, records):
    _, verifier, _ = pair
    per_answer = acc.drafter_acceptance(verifier, records, PAPER_SAMPLING)
    flat = torch.tensor([x for answer in per_answer for x in answer])
    torch.testing.assert_close(flat, torch.ones_like(flat), atol=1e-5, rtol=0)


def test_head_position_i_reads_feature_i_and_predicts_the_law_after_the_next_token(pair, records):
    """The copy head drafts q_{j-1} for the law q_j: its acceptance must be sum min(q_{j-1}, q_j)
    of the verifier's own consecutive laws, position for position."""
    _, verifier, _ = pair
    head = copy_head(verifier)
    measured = acc.head_acceptance(head, records, PAPER_SAMPLING)
    for r, got in zip(records, measured, strict=True):
        with torch.no_grad():
            logits = verifier(input_ids=r["ids"][None, :-1].long()).logits[0]
        q = process_logits(logits, PAPER_SAMPLING)  # [S - 1, V]: q[j] is the law of s_{j+1}
        start = r["prompt_len"] - 1
        expected = torch.minimum(q[start - 1 : -1], q[start:]).sum(-1)
        torch.testing.assert_close(torch.tensor(got), expected, atol=2e-3, rtol=0)
    assert acc.summary(measured, 0)["mean"] < 0.99  # consecutive laws differ: not a tautology


def test_batched_val_acceptance_equals_the_exact_per_record_measure(pair, records):
    _, verifier, _ = pair
    torch.manual_seed(0)
    ids = torch.arange(verifier.config.vocab_size)
    head = FeatureHead(verifier, ids).eval()  # random fc: any head will do
    lookup = subset_lookup(ids, verifier.config.vocab_size)
    exact = acc.summary(acc.head_acceptance(head, records, PAPER_SAMPLING), 0)["mean"]
    assert val_acceptance(head, records, lookup) == pytest.approx(exact, abs=1e-5)


def test_cached_head_step_equals_the_full_forward(pair, records):
    _, verifier, _ = pair
    torch.manual_seed(1)
    head = FeatureHead(verifier, torch.arange(0, verifier.config.vocab_size, 2)).eval()
    r = records[0]
    ids, features = r["ids"][None, 1:].long(), r["features"][None].float()
    with torch.no_grad():
        full = head.full_logits(ids, features)[0, -1]
        cache = DynamicCache()
        head.full_logits(ids[:, :-1], features[:, :-1], cache=cache, use_cache=True)
        step = head.full_logits(ids[:, -1:], features[:, -1:], cache=cache, use_cache=True)
    torch.testing.assert_close(step[0, -1], full, atol=1e-4, rtol=1e-4)


def test_acceptance_summary_interval_and_paired_difference():
    per_answer = [[0.5, 0.7], [0.9], [0.2, 0.4, 0.6]]
    out = acc.summary(per_answer, seed=0)
    assert out["mean"] == pytest.approx(3.3 / 6)
    assert out["ci95"][0] < out["mean"] < out["ci95"][1]
    assert (out["tokens"], out["answers"]) == (6, 3)
    shifted = [[x - 0.1 for x in answer] for answer in per_answer]
    diff = acc.paired_difference(per_answer, shifted, seed=0)
    assert diff["mean"] == pytest.approx(0.1)
    assert diff["ci95"] == pytest.approx([0.1, 0.1])  # paired: the prompt spread cancels
    with pytest.raises(ValueError, match="same answers"):
        acc.paired_difference(per_answer, per_answer[:2], seed=0)


def test_training_improves_acceptance_and_resumes(pair, tmp_path):
    _, verifier, tokenizer = pair
    settings = CollectSettings(max_new_tokens=10, batch_size=4)
    collect_shards(
        verifier, tokenizer, PROMPTS, tmp_path / "train", settings, 10**9, lambda _: None
    )
    ids = torch.arange(verifier.config.vocab_size)
    s = HeadSettings(train_minutes=0.02, ckpt_minutes=0.005, val_every=5)
    train_head(verifier, ids, tmp_path, s, lambda _: None)
    first = torch.load(tmp_path / "head.pt")["state"]
    longer = HeadSettings(train_minutes=0.04, ckpt_minutes=0.005, val_every=5)
    train_head(verifier, ids, tmp_path, longer, lambda _: None)
    second = torch.load(tmp_path / "head.pt")["state"]
    assert second["step"] > first["step"] and second["cpu_s"] >= 0.04 * 60
    rows = (tmp_path / "curve.csv").read_text().splitlines()[1:]
    curve = [float(row.split(",")[-1]) for row in rows]
    assert [int(row.split(",")[0]) for row in rows][0] == 0  # the untrained point comes first
    assert max(curve[1:]) > curve[0] + 0.1  # the distillation loss moves acceptance up


def test_collection_split_over_processes_writes_what_one_process_writes(pair, tmp_path):
    _, verifier, tokenizer = pair
    settings = CollectSettings(max_new_tokens=6, batch_size=3)
    quiet = lambda _: None  # noqa: E731
    collect_shards(verifier, tokenizer, PROMPTS, tmp_path / "one", settings, 10**9, quiet)
    for part in (1, 0):  # the order the parts finish in does not matter
        collect_shards(
            verifier,
            tokenizer,
            PROMPTS,
            tmp_path / "two",
            settings,
            10**9,
            quiet,
            part=part,
            parts=2,
        )
    one, _ = load_shards(tmp_path / "one")
    two, totals = load_shards(tmp_path / "two")
    assert len(totals["names"]) == 4 and len(one) == len(two) == len(PROMPTS)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a["ids"], b["ids"]) and torch.equal(a["q_idx"], b["q_idx"])


def test_decision_calls_a_low_result_no_go_only_at_the_planned_budget():
    plan = SimpleNamespace(train_tokens=200_000, train_minutes=40.0)
    assert decision(GO_THRESHOLD, 10, 1.0, plan) == "go"  # a high result counts at any budget
    assert decision(0.5, 190_000, 37.0, plan) == "no-go"
    assert decision(0.5, 35_868, 40.0, plan).startswith("inconclusive")
    assert decision(0.5, 200_000, 5.5, plan).startswith("inconclusive")
