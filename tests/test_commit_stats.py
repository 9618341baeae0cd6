"""The out-of-head count (engine/commit_stats.py) and the repetition measures (engine/record.py),
on constructed tensors and sequences, and in the engine's steps at batch 1 and batched."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.engine import BatchRequest, SamplingParams, SpeculativeDecoder
from cactus_bench.engine.commit_stats import out_of_head, step_out_of_head
from cactus_bench.engine.record import RequestRecord, ends_in_loop, repeated_ngram_share
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")


def test_out_of_head_counts_only_accepted_drafts_below_c_max_q():
    q_at = torch.tensor([[0.05, 0.5, 0.01], [0.3, 0.02, 0.9]])  # [B=2, m=3]
    q_max = torch.tensor([[0.5, 0.5, 0.5], [0.4, 0.5, 0.9]])
    # row 0: positions 0 (0.05 < 0.1) and 2 (0.01 < 0.1) are low; 2 accepted -> only position 0
    # row 1: position 1 (0.02 < 0.1) is low; 3 accepted -> 1
    assert out_of_head(q_at, q_max, torch.tensor([2, 3]), 0.2).tolist() == [1, 1]
    assert out_of_head(q_at, q_max, torch.tensor([0, 1]), 0.2).tolist() == [0, 0]
    assert out_of_head(q_at, q_max, torch.tensor([3, 3]), 0.0).tolist() == [0, 0]  # never below 0
    # c = 1: everything strictly below the top counts
    assert out_of_head(q_at, q_max, torch.tensor([3, 3]), 1.0).tolist() == [2, 2]
    with pytest.raises(ValueError, match="must lie in"):
        out_of_head(q_at, q_max, torch.tensor([1, 1]), 1.5)


def test_step_out_of_head_reads_the_drafts_probabilities_and_the_emitted_tail():
    target = torch.tensor([[[0.7, 0.2, 0.1], [0.05, 0.9, 0.05], [0.3, 0.3, 0.4]]])  # [1, 3, 3]
    drafts = torch.tensor([[2, 0]])  # q_1(2) = 0.1 < 0.14, q_2(0) = 0.05 < 0.18
    assert step_out_of_head(target, drafts, torch.tensor([[2, 0, 1]]), 0.2).tolist() == [2]
    assert step_out_of_head(target, drafts, torch.tensor([[2, 1, -1]]), 0.2).tolist() == [1]
    # a step of bonus tokens only (no drafts)
    empty = torch.zeros((2, 0), dtype=torch.long)
    assert step_out_of_head(
        target.expand(2, 3, 3), empty, torch.tensor([[1], [0]]), 0.2
    ).tolist() == [0, 0]


def test_repetition_measures_on_constructed_answers():
    assert repeated_ngram_share([1, 2, 3]) is None  # no 4-gram
    assert repeated_ngram_share(list(range(30))) == 0.0
    assert repeated_ngram_share([7] * 10) == pytest.approx(6 / 7)  # 7 grams, all but one repeat
    assert repeated_ngram_share([1, 2, 1, 2, 1, 2], n=2) == pytest.approx(3 / 5)
    assert ends_in_loop([5] * 24) and not ends_in_loop([5] * 23)
    cycle = list(range(40)) + [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] * 3
    assert ends_in_loop(cycle)
    assert not ends_in_loop(cycle + [99])  # the tail is broken by the last token
    assert not ends_in_loop(list(range(200)))
    assert ends_in_loop(list(range(64)) * 3)  # the longest period looked for
    assert not ends_in_loop(list(range(65)) * 3)
    record = RequestRecord([1], [4] * 30, drafted_per_step=[2, 2], accepted_per_step=[2, 1])
    data = record.to_dict()
    assert data["ends_in_loop"] and data["accept_rate"] == 0.75
    assert data["out_of_head_commits"] is None  # not counted by this (hand-made) record


def _decoder(tiny_pair, c):
    drafter, verifier, tok = tiny_pair
    sampling = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
    sampler = make_sampler("cactus", delta=1.0)
    return SpeculativeDecoder(
        drafter, verifier, tok, sampler, 3, sampling=sampling, eos_token_ids=[], out_of_head_c=c
    )


def test_the_engine_counts_out_of_head_commits_per_step_alike_at_any_batch(tiny_pair):
    prompts = ([41], [72, 101, 108, 108, 111], [286, 84, 82, 68, 81, 198, 41])
    requests = [BatchRequest(prompts[i % 3], 16 + 3 * i, seed=100 + i) for i in range(5)]
    counted = _decoder(tiny_pair, 1.0)  # every accepted draft below q's top counts
    batched = counted.generate_batch(requests, batch=3)
    alone = [counted.generate(r.prompt_ids, r.max_new_tokens, seed=r.seed) for r in requests]
    for together, single in zip(batched, alone, strict=True):
        assert together.output_ids == single.output_ids
        assert together.out_of_head_per_step == single.out_of_head_per_step
        assert len(single.out_of_head_per_step) == single.num_steps
        assert all(
            0 <= n <= a
            for n, a in zip(single.out_of_head_per_step, single.accepted_per_step, strict=True)
        )
    assert sum(r.out_of_head_commits for r in alone) > 0
    never = _decoder(tiny_pair, 0.0).generate_batch(requests, batch=3)
    assert all(r.out_of_head_commits == 0 for r in never)
