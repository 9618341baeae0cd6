"""Every catalogue rule through both bridges' layouts: no host read of the rule's, FLy's window
through V2, out-of-range drafts rejected, and chunked steps equal to whole ones (pure torch).

The rules come from the registry (cactus_bench.samplers.SAMPLERS), so a rule added there is
covered here with no edit. Runner V2's layout must read nothing on the host (its step runs
between CUDA-graph replays under asynchronous scheduling: bridge_v2.py); runner V1's compacts
rows to their support at two scalar reads per chunk (padded_rows.compact_rows), and a rule
may add none. Host reads are counted by the dispatch-mode counter of test_vllm_v2.py.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from helpers.laws import P_VALUE_FLOOR, chi_square_p_value, laws, step_law
from helpers.vllm_fakes import DraftLogitsCache as Cache
from helpers.vllm_fakes import HostReads, v2_layout

from cactus_bench.samplers import SAMPLERS, make_sampler
from cactus_bench.vllm import bridge, bridge_v2, memory, working_set
from cactus_bench.vllm.padded_rows import PLACEHOLDER_TOKEN_ID

pytestmark = pytest.mark.usefixtures("single_thread")
# V1's support compaction per chunk: the total support, then (sparse) the nonzero lists and
# the largest row's support
V1_COMPACTION_READS = ["_local_scalar_dense", "nonzero", "_local_scalar_dense"]


def every_rule() -> list:
    """Each registered rule with its defaults; a rule whose test law defaults to the
    temperature-1 laws reads the processed ones (the bridges pass no unscaled laws)."""
    rules = []
    for name in sorted(SAMPLERS):
        rule = make_sampler(name)
        if getattr(rule, "reads_unscaled", False):
            rule = make_sampler(name, test_law="processed")
        rules.append(pytest.param(rule, id=name))
    return rules


def v1_layout(draft: torch.Tensor, target: torch.Tensor, drafts: torch.Tensor):
    """The same step in V1's layout (rejection_sample_v1's arguments, before `rule`)."""
    batch, m = drafts.shape
    metadata = SimpleNamespace(all_greedy=False, all_random=True, temperature=None, generators={})
    return (
        drafts.reshape(-1),
        [m] * batch,
        m,
        torch.arange(1, batch + 1) * m,
        draft.float().repeat(batch, 1),
        target[:m].log().float().repeat(batch, 1),
        torch.zeros(batch, 1, dtype=torch.long),
        metadata,
    )


def sparse_pair(m: int, vocab: int, seed: int):
    """[m, V] drafter and [m + 1, V] verifier laws on a few ids each (as top-k leaves them),
    and 6 requests' drafts sampled from the drafter."""
    g = torch.Generator().manual_seed(seed)

    def rows(n):
        logits = torch.randn(n, vocab, generator=g) * 2
        keep = logits >= logits.topk(4, dim=-1).values[:, -1:]
        return torch.softmax(logits.masked_fill(~keep, float("-inf")), -1)

    draft, target = rows(m), rows(m + 1)
    drafts = torch.stack([torch.multinomial(draft[j], 6, True, generator=g) for j in range(m)], 1)
    return draft, target, drafts


@pytest.mark.parametrize("rule", every_rule())
def test_every_rule_through_v2_reads_nothing_on_the_host(rule):
    args, per_state = v2_layout(*sparse_pair(m=3, vocab=64, seed=1))
    with HostReads() as mode:
        sampled, num_sampled = bridge_v2.rejection_sample_v2(*args, *per_state, rule=rule)
    assert mode.reads == []
    assert sampled.shape == (6, 4) and ((num_sampled >= 1) & (num_sampled <= 4)).all()


@pytest.mark.parametrize("rule", every_rule())
def test_every_rule_through_v1_adds_no_read_to_the_compaction(rule):
    args = v1_layout(*sparse_pair(m=3, vocab=64, seed=2))
    with HostReads() as mode:
        out = bridge.rejection_sample_v1(*args, rule=rule)
    assert mode.reads == V1_COMPACTION_READS
    assert out.shape == (6, 4)


def test_fly_through_v2_samples_its_whole_step_law():
    """FLy's held rejections (across_window) through the V2 layout: the emitted rows follow the
    brute-force law of test_samplers_fly.py (theta 0.3, W = 2, m = 3), not SpS's."""
    draft, target = laws(seed=5, m=3, vocab=3)
    samples = 20_000
    g = torch.Generator().manual_seed(11)
    drafts = [torch.multinomial(draft[j], samples, True, generator=g) for j in range(3)]
    args, per_state = v2_layout(draft, target, torch.stack(drafts, 1), seed=12)
    rule = make_sampler("fly", entropy_threshold=0.3, window=2)
    sampled, num_sampled = bridge_v2.rejection_sample_v2(*args, *per_state, rule=rule)
    rows = Counter(
        tuple(row[:n]) for row, n in zip(sampled.tolist(), num_sampled.tolist(), strict=True)
    )
    fly = step_law(draft.tolist(), target.tolist(), theta=0.3, window=2)
    sps = step_law(draft.tolist(), target.tolist(), theta=float("inf"), window=2)
    assert chi_square_p_value(rows, fly, samples) > P_VALUE_FLOOR
    # the window mattered: SpS's law is refused (the test has power)
    assert chi_square_p_value(rows, sps, samples) < P_VALUE_FLOOR


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_a_draft_outside_the_verifiers_vocabulary_is_rejected_not_clamped(layout):
    """A drafter with a larger vocabulary: its draft id V + 2 is rejected even where the
    verifier puts all its mass on V - 1 (what clamping would have accepted)."""
    vocab, m = 8, 2
    draft = torch.full((m, vocab), 1.0 / vocab)
    target = torch.full((m + 1, vocab), 1e-9)
    target[:, vocab - 1] = 1.0
    target = target / target.sum(-1, keepdim=True)
    drafts = torch.tensor([[vocab + 2, vocab - 1]] * 4)
    rule = make_sampler("sps")
    if layout == "v2":
        args, per_state = v2_layout(draft, target, drafts)
        wide = torch.cat([args[1].values, args[1].values[..., :3]], -1)  # V' = V + 3
        args = (args[0], Cache(values=wide, row_mapping=None), *args[2:])
        sampled, num_sampled = bridge_v2.rejection_sample_v2(*args, *per_state, rule=rule)
        assert (num_sampled == 1).all()
    else:
        args = v1_layout(torch.cat([draft, draft[:, :3]], -1), target, drafts)
        target_rows = torch.cat([args[5], torch.full((args[5].shape[0], 3), -50.0)], -1)
        args = (*args[:5], target_rows[:, :vocab], *args[6:])  # the verifier's V columns
        sampled = bridge.rejection_sample_v1(*args[:4], args[4][:, :vocab], *args[5:], rule=rule)
    assert (sampled[:, 0] == vocab - 1).all()  # the recovery, from the verifier's law
    assert (sampled[:, 1:] == PLACEHOLDER_TOKEN_ID).all()


@pytest.mark.parametrize("name", ["sps", "mentored", "fly"])
def test_a_step_in_chunks_emits_what_the_whole_step_does(name, monkeypatch):
    """The cap splits 6 requests into chunks of 1, 2 and 4; the uniforms are drawn once for
    the batch, so every chunking emits the same tokens as the whole step."""
    rule = make_sampler(name)
    args, per_state = v2_layout(*sparse_pair(m=3, vocab=64, seed=3), seed=4)
    whole = bridge_v2.rejection_sample_v2(*args, *per_state, rule=rule)
    per_request = 4 * 64 * memory.bridge_bytes_per_logit(name)
    for requests in (1, 2, 4):
        monkeypatch.setattr(working_set, "CAP_BYTES", requests * per_request)
        chunked = bridge_v2.rejection_sample_v2(*args, *per_state, rule=rule)
        assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1])


def test_the_tally_counts_what_the_bridge_verified_and_accepted(monkeypatch):
    monkeypatch.setattr(working_set, "DRAFT_TALLY", {})
    args, per_state = v2_layout(*sparse_pair(m=3, vocab=64, seed=5))
    _, num_sampled = bridge_v2.rejection_sample_v2(*args, *per_state, rule=make_sampler("sps"))
    assert working_set.tally_totals() == (6 * 3, int((num_sampled - 1).sum()))
