"""Batched decoding (`generate_batch`) on the tiny pair: each request's tokens equal its batch-1
tokens (greedy and sampled, rows of different prompt lengths, more requests than slots), slots
are refilled as requests end, records and the step log are filled, and HF's forward refuses
batch > 1 in one line. The emitted laws at batch > 1 are checked in test_engine_laws.py."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.engine import (
    AutoregressiveDecoder,
    BatchRequest,
    SamplingParams,
    SpeculativeDecoder,
    runtime,
)
from cactus_bench.engine.cpu_kernels import resolve_linear_kernel
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")

GREEDY = SamplingParams(temperature=0.0)
PAPER = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
# Prompts of 1, 5, 7 and 12 tokens, so the rows of a step sit at different positions.
PROMPTS = (
    [41],
    [72, 101, 108, 108, 111],
    [286, 84, 82, 68, 81, 198, 41],
    [84, 104, 101, 32, 97, 110, 115, 119, 101, 114, 32, 105],
)


@pytest.fixture(params=["auto", "onednn"])
def linear_kernel(request, monkeypatch):
    """The batched forward on ATen's products and on oneDNN's packs (x86 only)."""
    if request.param == "onednn":
        if resolve_linear_kernel("auto", torch.device("cpu"), torch.float32) != "onednn":
            pytest.skip("oneDNN packs need an x86 CPU and torch's oneDNN")
        monkeypatch.setattr(runtime, "DEFAULT_LINEAR_KERNEL", "onednn")
    return request.param


def requests(count: int, sampling=None, budget: int = 14) -> list[BatchRequest]:
    """`count` requests cycling through PROMPTS, with budgets that differ by request."""
    return [
        BatchRequest(
            PROMPTS[i % len(PROMPTS)], budget + 5 * (i % 3), seed=100 + i, sampling=sampling
        )
        for i in range(count)
    ]


def one_by_one(decoder, batch: list[BatchRequest]) -> list[list[int]]:
    return [
        decoder.generate(
            r.prompt_ids, r.max_new_tokens, seed=r.seed, sampling=r.sampling
        ).output_ids
        for r in batch
    ]


def speculative(tiny_pair, sampling, rule="cactus", m=3, **kwargs):
    drafter, verifier, tok = tiny_pair
    sampler = make_sampler(rule, delta=1.0) if rule == "cactus" else make_sampler(rule)
    return SpeculativeDecoder(
        drafter,
        verifier,
        tok,
        sampler,
        num_draft_tokens=m,
        sampling=sampling,
        eos_token_ids=[],
        **kwargs,
    )


@pytest.mark.parametrize("sampling", [GREEDY, PAPER], ids=["greedy", "sampled"])
def test_batched_tokens_equal_batch_one_tokens(tiny_pair, linear_kernel, sampling):
    """9 requests through 4 slots (refills), both decoders: the same tokens as `generate`.
    Sampled rows too: each row draws from its own generator in the batch-1 order; in fp32 the
    batched products round like the one-row ones closely enough that no draw flips here."""
    _, verifier, tok = tiny_pair
    batch = requests(9, sampling)
    for decoder in (
        AutoregressiveDecoder(verifier, tok, sampling=sampling, eos_token_ids=[]),
        speculative(tiny_pair, sampling),
    ):
        expected = one_by_one(decoder, batch)
        records = decoder.generate_batch(batch, batch=4)
        assert [r.output_ids for r in records] == expected
        assert [r.prompt_ids for r in records] == [r.prompt_ids for r in batch]  # request order
        assert [r.output_ids for r in decoder.generate_batch(batch, batch=1)] == expected


def test_batched_rows_mix_sampling_settings_rules_and_token_map(tiny_pair):
    """Rows of one batch with different temperatures (greedy rows verify with the greedy rule),
    a rule that reads the temperature-1 laws (fsd), and a token_map restricting both models."""
    _, verifier, tok = tiny_pair
    token_map = torch.arange(0, verifier.config.vocab_size, 2)  # every other id
    mixed = [PAPER, GREEDY, SamplingParams(1.0), SamplingParams(0.8, top_k=5)]
    batch = [
        BatchRequest(r.prompt_ids, r.max_new_tokens, seed=r.seed, sampling=mixed[i % 4])
        for i, r in enumerate(requests(7))
    ]
    for rule in ("cactus", "fsd"):
        decoder = speculative(tiny_pair, PAPER, rule=rule, m=2, token_map=token_map)
        records = decoder.generate_batch(batch, batch=3)
        assert [r.output_ids for r in records] == one_by_one(decoder, batch)
        assert {r.sampler_name for r in records} == {"greedy", rule}
        kept = set(token_map.tolist())
        assert all(set(r.output_ids) <= kept for r in records)


def test_batched_rows_stop_at_eos_and_stop_strings_as_at_batch_one(tiny_pair):
    """Rows end at different steps (EOS ids, a stop string, the budget) and free their slots."""
    drafter, verifier, tok = tiny_pair
    eos = [ord("e"), ord("s")]
    batch = [
        BatchRequest(r.prompt_ids, 24, stop=[" t"], seed=r.seed, sampling=PAPER)
        for r in requests(8)
    ]
    for decoder in (
        AutoregressiveDecoder(verifier, tok, sampling=PAPER, eos_token_ids=eos),
        SpeculativeDecoder(
            drafter, verifier, tok, make_sampler("sps"), 4, sampling=PAPER, eos_token_ids=eos
        ),
    ):
        expected = [decoder.generate(r.prompt_ids, r.max_new_tokens, r.stop, r.seed) for r in batch]
        records = decoder.generate_batch(batch, batch=3)
        for record, alone in zip(records, expected, strict=True):
            assert (record.output_ids, record.text) == (alone.output_ids, alone.text)
            assert record.stop_reason == alone.stop_reason
        assert {r.stop_reason for r in records} >= {"eos", "length"}


def test_slot_of_a_finished_request_takes_the_next_queued_one(tiny_pair):
    """Request 0 is short, 1 long, 2 queued: with 2 slots, request 2 starts in request 0's slot
    right after request 0 ends, long before request 1 ends."""
    _, verifier, tok = tiny_pair
    decoder = AutoregressiveDecoder(verifier, tok, sampling=PAPER, eos_token_ids=[])
    batch = [BatchRequest(PROMPTS[1], 3, seed=1), BatchRequest(PROMPTS[2], 30, seed=2)]
    batch.append(BatchRequest(PROMPTS[3], 5, seed=3))
    records = decoder.generate_batch(batch, batch=2)
    log = decoder.step_log
    prefills = [(step.slots[0], step.requests[0]) for step in log if step.kind == "prefill"]
    assert prefills == [(0, 0), (1, 1), (0, 2)]
    decodes = [step for step in log if step.kind == "decode"]
    # Request 0 decodes 3 steps beside request 1, then request 2 joins in slot 0.
    assert [step.requests for step in decodes[:4]] == [[0, 1]] * 3 + [[2, 1]]
    assert len(decodes) == 30  # request 1's steps: the others ran alongside it
    assert records[0].finished_s <= records[2].started_s < records[1].finished_s
    assert [r.batch_size for r in records] == [2, 2, 2]
    assert [r.num_generated for r in records] == [3, 30, 5]


def test_records_and_step_log_account_for_every_step(tiny_pair):
    decoder = speculative(tiny_pair, PAPER, m=3)
    batch = requests(6)
    records = decoder.generate_batch(batch, batch=4)
    decodes = [step for step in decoder.step_log if step.kind == "decode"]
    for index, record in enumerate(records):
        mine = [step for step in decodes if index in step.requests]
        assert len(mine) == record.num_steps
        at = [step.requests.index(index) for step in mine]
        assert [s.drafts[i] for s, i in zip(mine, at, strict=True)] == record.drafted_per_step
        assert [s.accepted[i] for s, i in zip(mine, at, strict=True)] == record.accepted_per_step
        assert [s.fed[i] for s, i in zip(mine, at, strict=True)] == [
            d + 1 for d in record.drafted_per_step
        ]
        # Every step's time is charged to every row active in it.
        assert record.draft_time_s == pytest.approx(sum(step.draft_s for step in mine))
        assert record.verify_time_s == pytest.approx(sum(step.verify_s for step in mine))
        assert record.sampler_time_s == pytest.approx(sum(step.rule_s for step in mine))
        assert 0 <= record.started_s < record.finished_s
        assert record.total_time_s == pytest.approx(record.finished_s - record.started_s)
        assert record.prefill_time_s > 0 or len(record.prompt_ids) == 1
        assert sum(record.emitted_per_step) >= record.num_generated > 0
    assert max(step.rows for step in decodes) == 4
    # A slot freed between two busy ones (no request left to take it) is skipped, not fed.
    assert any(step.slots != list(range(step.slots[0], step.slots[-1] + 1)) for step in decodes)
    assert sum(step.kind == "prefill" for step in decoder.step_log) == len(batch)


def test_hf_forward_refuses_batches_in_one_line_and_runs_batch_one(tiny_pair):
    _, verifier, tok = tiny_pair
    decoder = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[], fast="off")
    batch = requests(3)
    with pytest.raises(ValueError, match=r"batch=2 needs the fast forward.*fast='off'") as err:
        decoder.generate_batch(batch, batch=2)
    assert "\n" not in str(err.value)
    records = decoder.generate_batch(batch, batch=1)
    assert [r.output_ids for r in records] == one_by_one(decoder, batch)
    assert records[0].finished_s <= records[1].started_s  # one after the other, one clock
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        decoder.generate_batch(batch, batch=0)


def test_requests_as_dicts_and_empty_batches(tiny_pair):
    _, verifier, tok = tiny_pair
    decoder = AutoregressiveDecoder(verifier, tok, sampling=GREEDY, eos_token_ids=[])
    assert decoder.generate_batch([], batch=4) == []
    records = decoder.generate_batch(
        [{"prompt_ids": PROMPTS[1], "max_new_tokens": 4, "seed": 5, "stop": "x"}], batch=4
    )
    assert records[0].seed == 5 and records[0].num_generated <= 4
    assert records[0].batch_size == 1  # one request: one slot
    with pytest.raises(ValueError, match="BatchRequest or a dict"):
        decoder.generate_batch([PROMPTS[0]], batch=2)


def test_batched_decode_steps_of_more_than_probed_rows_take_the_packs_that_won():
    """fp32 runners probe 1..8 rows; a batched decode step of up to BATCH_PACKED_ROWS rows
    follows the 8-row choice, a prefill (or a larger step) keeps the runner's own."""
    from cactus_bench.engine.batch_cache import BATCH_PACKED_ROWS, BatchRunner

    class Runner:  # the packs won from 4 rows, as measured on SmolLM2 here
        device = torch.device("cpu")

        @staticmethod
        def uses_packs(rows: int) -> bool:
            return 4 <= rows <= 8

    batched = BatchRunner(Runner())
    assert [batched._packed(rows, decode=True) for rows in (1, 4, 8, 9)] == [0, 1, 1, 1]
    assert batched._packed(BATCH_PACKED_ROWS, decode=True)
    assert not batched._packed(BATCH_PACKED_ROWS + 1, decode=True)
    assert not batched._packed(16, decode=False)


@pytest.mark.parametrize("which", ["drafter", "verifier"])
def test_a_law_that_cannot_be_sampled_is_refused_in_one_line(tiny_pair, which):
    """NaN logits reach the step's one read as a flag: the batched step raises the same line as
    `sample_token` instead of drawing from a broken law."""
    import copy

    drafter, verifier = (copy.deepcopy(model) for model in tiny_pair[:2])
    tok = tiny_pair[2]
    broken = drafter if which == "drafter" else verifier
    with torch.no_grad():
        broken.lm_head.weight.fill_(float("nan"))
    decoder = SpeculativeDecoder(drafter, verifier, tok, make_sampler("sps"), 2, sampling=PAPER)
    with pytest.raises(ValueError, match="cannot sample a token"):
        decoder.generate_batch(requests(3, PAPER), batch=2)
