"""The speculative step's device part (engine/device_step.py, slot_state.py) is tensor-only: the
drafter loop, the verifier's forward, the rule and the roll-back trace into one graph with no
host read or data-dependent shape (the CPU proof that a CUDA graph can capture them); the step's
draws come from one call with the keys of the per-stream calls; and the decoders report the
counters the GPU records read (`device_stats`)."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from cactus_bench.bench.op_count import OpCounter, compiles_fullgraph
from cactus_bench.engine import BatchRequest, SpeculativeDecoder
from cactus_bench.engine.device_step import RuleGroup, VerifyHost, draft_loop, verify_side
from cactus_bench.engine.draws import ACCEPT, DRAFT, LAST, request_keys, step_uniforms, uniforms
from cactus_bench.engine.sampling import PAPER_SAMPLING, process_logits
from cactus_bench.engine.slot_state import SlotState
from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.guards import ThinkIds
from cactus_bench.tasks.stop_set import StopSet

pytestmark = pytest.mark.usefixtures("single_thread")
PROMPTS = ([5, 6, 7, 8, 9], [11, 12, 13])
THINK = (7, 12)  # stand-ins for <think>, </think>: the first prompt opens it, the second closes


def _rule(name: str, think=THINK, **settings):
    """A rule by name; "guarded": Cactus with both per-position guards, on `think`'s ids."""
    if name != "guarded":
        return make_sampler(name, **settings)
    rule = make_sampler("cactus", delta=1.0, strict_first=4, relax_in="think")
    rule.vocab_stop_set = StopSet(stop_ids=(0,), think_open=think[0], think_close=think[1])
    return rule


def _device_step(tiny_pair, rule_name: str, m: int, masked: bool = False):
    """(step, its runners' caches, slots): one speculative step over two prefilled slots, as
    the engine runs it but on the static forwards (what a CUDA graph captures), with the guards'
    mask and think state and the out-of-head count; masked: its rows in two rule groups (m
    drafts; none, the bonus draw), each masked on the device."""
    drafter, verifier, tokenizer = tiny_pair
    rule = _rule(rule_name)
    decoder = SpeculativeDecoder(drafter, verifier, tokenizer, rule, m, PAPER_SAMPLING, [])
    runners = decoder.batch_runners(len(PROMPTS))
    caches = {name: runner.new_cache(len(PROMPTS), 64) for name, runner in runners.items()}
    slots = SlotState(len(PROMPTS), torch.device("cpu"))
    for slot, prompt in enumerate(PROMPTS):
        for name, runner in runners.items():
            runner.prefill(caches[name], slot, prompt[:-1])
        inside = decoder.think_ids is not None and decoder.think_ids.inside_after(prompt)
        slots.start(slot, 7 + slot, PAPER_SAMPLING, len(prompt), 20, prompt[-1], inside)
    think = () if decoder.think_ids is None else THINK  # no token_map: sampler space = vocab
    state = slots.view(0, len(PROMPTS))

    def same(indices):
        return indices

    def process(logits):
        return process_logits(logits, PAPER_SAMPLING)

    def drafter_forward(j, ids, counts):
        return runners["drafter"].static_forward(ids, counts, caches["drafter"], False)

    def step():
        drafts, draws = state.drafts(m), state.uniforms(m)
        out = draft_loop(
            drafter_forward,
            process,
            same,
            state.drafter_ids[:, :1],
            state.drafter_count * (drafts > 0),
            drafts,
            draws,
            state.greedy,
            m,
            False,
        )
        return verify_side(verifier_forward, process, same, state, (drafts, draws, out), *rest)

    def verifier_forward(ids, counts):
        return runners["verifier"].static_forward(ids, counts, caches["verifier"], True)

    def groups(drafts):  # the rule over every slot with m drafts
        if not masked:
            return [RuleGroup(rule, m, None, None, False)]
        return [RuleGroup(rule, n, (drafts == n) & state.active, None, False) for n in (m, 0)]

    rest = (groups, m, caches, VerifyHost(think, 0.2))
    return step, caches, slots


@pytest.mark.parametrize(
    ("rule", "masked"), [("sps", False), ("cactus", True), ("fly", True), ("guarded", False)]
)
def test_the_device_step_traces_whole(tiny_pair, rule, masked):
    step, _, _ = _device_step(tiny_pair, rule, m=3, masked=masked)
    with torch.inference_mode():
        traced, reason = compiles_fullgraph(step)
    assert traced, reason


@pytest.mark.parametrize("rule", ["sps", "guarded"])
def test_the_device_step_stalls_never_and_emits_each_row_s_tokens(tiny_pair, rule):
    step, caches, slots = _device_step(tiny_pair, rule, m=3)
    with torch.inference_mode(), OpCounter() as counter:
        emitted, bad, off_head = step()
    assert counter.stalls == 0, dict(counter.stalls_by_kind)
    rows = emitted.tolist()
    for tokens in rows:  # 1..m + 1 tokens, then -1
        count = sum(token >= 0 for token in tokens)
        assert 1 <= count <= 4 and all(token < 0 for token in tokens[count:])
    assert not bad.any()
    # the verifier rolled back to L + accepted, the sequence length moved by the emitted count
    accepted = torch.tensor([sum(t >= 0 for t in row) - 1 for row in rows])
    lengths = torch.tensor([len(p) for p in PROMPTS])
    assert torch.equal(caches["verifier"].lengths, lengths + accepted)
    assert torch.equal(slots.view(0, 2).answer_offsets, accepted + 1)  # the guards' offset
    assert (off_head >= 0).all() and (off_head <= accepted).all()
    if rule == "guarded":  # the think state follows the prompt and the emitted tokens
        think_ids = ThinkIds(*THINK, *THINK)
        after = [
            think_ids.inside_after(prompt + [t for t in tokens if t >= 0])
            for prompt, tokens in zip(PROMPTS, rows, strict=True)
        ]
        assert slots.in_think.tolist() == after


def test_a_verify_capture_puts_back_every_slot_buffer_the_step_writes(tiny_pair):
    """step_graphs.advanced_buffers lists each SlotState buffer the step writes in place (its
    version counter moved), the guards' think state included, so a capture's warm-up restores
    them all; the draft loop writes none."""
    from cactus_bench.engine.step_graphs import advanced_buffers

    step, caches, slots = _device_step(tiny_pair, "guarded", m=3)
    buffers = {name: t for name, t in vars(slots).items() if isinstance(t, torch.Tensor)}
    before = {name: tensor._version for name, tensor in buffers.items()}
    with torch.no_grad():
        step()
    written = {name for name, tensor in buffers.items() if tensor._version != before[name]}
    restored = advanced_buffers(slots, caches)
    listed = {name for name, tensor in buffers.items() if any(tensor is b for b in restored)}
    assert "in_think" in written and written == listed


def test_one_call_draws_what_each_stream_draws_alone():
    seeds = torch.tensor([0, 7, -3, 2**40])
    lengths = torch.tensor([5, 9, 0, 123])
    m = 4
    together = step_uniforms(request_keys(seeds), lengths, m)  # [R, 2m + 1]
    offsets = torch.arange(m)
    assert torch.equal(together[:, :m], uniforms(seeds, lengths[:, None] + offsets, DRAFT))
    assert torch.equal(together[:, m : 2 * m], uniforms(seeds, lengths[:, None] + offsets, ACCEPT))
    assert torch.equal(together[:, 2 * m], uniforms(seeds, lengths, LAST))
    assert step_uniforms(request_keys(seeds), lengths, 0).shape == (4, 1)


def test_decoders_report_their_device_counters(tiny_pair):
    drafter, verifier, tokenizer = tiny_pair
    rule = make_sampler("sps")
    decoder = SpeculativeDecoder(drafter, verifier, tokenizer, rule, 3, PAPER_SAMPLING, [])
    assert decoder.device_stats()["graph_replays"] == 0  # before any run
    requests = [BatchRequest(list(p), 9, seed=i) for i, p in enumerate(PROMPTS)]
    decoder.generate_batch(requests, batch=2)
    stats = decoder.device_stats()
    steps = [s for s in decoder.step_log if s.kind == "decode"]
    assert set(stats) == {"graph_replays", "eager_forwards", "capture_failed", "phase_ms"}
    assert stats["graph_replays"] == 0 and stats["capture_failed"] is False  # a CPU: no graphs
    # every step: m drafter forwards (fewer near a request's end) and one verifier forward
    drafter_forwards = sum(max(step.drafts) for step in steps)
    assert stats["eager_forwards"] == drafter_forwards + len(steps)
    phases = stats["phase_ms"]
    assert set(phases) == {"draft", "verify", "rule", "other"}
    assert all(value >= 0 for value in phases.values()) and phases["draft"] > 0
    step_ms = 1000 * sum(step.step_s for step in steps) / len(steps)
    assert sum(phases.values()) == pytest.approx(step_ms)


class _ReplayedGraph:
    """A stand-in for a captured CUDA graph on a CPU: replay re-runs the function and writes
    its results into the outputs the capture returned, as a graph writes its static outputs."""

    def __init__(self, fn):
        self.fn = fn

    def replay(self):
        for static, fresh in zip(_tensors(self.outputs), _tensors(self.fn()), strict=True):
            static.copy_(fresh)


def _tensors(outputs) -> list[torch.Tensor]:
    """Every tensor of a step function's outputs (tuples, lists, dataclasses), in order."""
    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if dataclasses.is_dataclass(outputs):
        outputs = [getattr(outputs, field.name) for field in dataclasses.fields(outputs)]
    return [tensor for item in outputs for tensor in _tensors(item)]


def _fake_capture(self, fn, state):
    saved = [tensor.clone() for tensor in state]
    graph = _ReplayedGraph(fn)
    graph.outputs = fn()  # capture allocates the static outputs; the state is put back
    for tensor, value in zip(state, saved, strict=True):
        tensor.copy_(value)
    return graph, graph.outputs


def _graphed_run(tiny_pair, monkeypatch, rule, requests, batch, captured: bool, counted=None):
    """(records, step log, device_stats, StepGraphs or None) of one batched run, its steps'
    functions captured by the CPU stand-in graph when `captured`; counted(step) wraps steps."""
    from cactus_bench.engine.step_graphs import StepGraphs

    drafter, verifier, tokenizer = tiny_pair
    decoder = SpeculativeDecoder(drafter, verifier, tokenizer, rule, 3, PAPER_SAMPLING, [])
    graphs = None
    if captured:
        graphs = StepGraphs(torch.device("cpu"))
        monkeypatch.setattr(StepGraphs, "_capture", _fake_capture)
        monkeypatch.setattr(decoder, "step_graphs", lambda caches, slots: graphs)
    if counted is not None:
        decoder.batch_step = counted(type(decoder).batch_step.__get__(decoder))
    records = decoder.generate_batch(requests, batch=batch)
    steps = [s for s in decoder.step_log if s.kind == "decode"]
    return records, steps, decoder.device_stats(), graphs


# Budgets that end rows at different steps: bonus steps, ragged drafts, a smaller final wave.
RAGGED = [BatchRequest([5, 6, 7, 8][: 2 + i % 3], 6 + 2 * i, seed=i) for i in range(6)]
# Think ids these runs emit (174 opens, 166 closes): the rows' think state changes mid-run,
# so a graph that misread or double-advanced it (step_graphs.advanced_buffers) decodes otherwise.
GUARDED = {"think": (174, 166)}


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("rule", ["sps", "cactus", "fly", "guarded"])
def test_a_replayed_step_decodes_the_eager_tokens(tiny_pair, monkeypatch, rule, batch):
    """The captured path (the draft loop and the verify side, device_step.verify_side, each a
    graph) on a CPU with graphs that re-run their function: the eager path's tokens and
    out-of-head counts (guarded: the relax mask and think state read inside the graph), two
    replays a drafting step (one a bonus step), no eager forward, the rule timed in verify."""
    settings = {"cactus": {"delta": 1.0}, "fly": {"window": 1}, "guarded": GUARDED}.get(rule, {})
    sampled = {}
    for captured in (False, True):
        made = _rule(rule, **settings)
        records, steps, stats, graphs = _graphed_run(
            tiny_pair, monkeypatch, made, RAGGED, batch, captured
        )
        sampled[captured] = [(r.output_ids, r.out_of_head_per_step) for r in records]
        if not captured:
            assert stats["phase_ms"]["rule"] > 0  # eager: the rule's phase of its own
    assert sampled[True] == sampled[False]
    drafting = sum(max(step.drafts) > 0 for step in steps)
    assert drafting > 0
    if batch == 1:
        assert drafting < len(steps)  # bonus steps ran: the verify graph alone
    else:  # rows with different m_b in a step (masked rule groups), and a smaller final wave
        assert any(len(set(step.drafts)) > 1 for step in steps)
        assert any(len(step.slots) < batch for step in steps)
    assert stats["graph_replays"] == drafting + len(steps)  # 2 a drafting step, 1 a bonus
    assert stats["eager_forwards"] == 0 and stats["capture_failed"] is False
    assert stats["phase_ms"]["rule"] is None and all(step.rule_in_verify for step in steps)
    kinds = {key[0] for key in graphs._graphs}
    assert kinds == {"draft", "verify"} and graphs.capture_s > 0


@pytest.mark.parametrize("rule", ["sps", "fly", "guarded"])
def test_a_replayed_step_stalls_once(tiny_pair, monkeypatch, rule):
    """The captured path's host side reads its static outputs once a step, never more."""
    counters = []

    def counted(step):
        def run(run, rows):
            with OpCounter() as counter:
                emitted = step(run, rows)
            counters.append(counter)
            return emitted

        return run

    made = _rule(rule, **{"fly": {"window": 1}, "guarded": GUARDED}.get(rule, {}))
    _, steps, stats, _ = _graphed_run(tiny_pair, monkeypatch, made, RAGGED, 4, True, counted)
    assert stats["graph_replays"] > len(steps)  # the steps replayed their graphs
    assert [c.stalls for c in counters] == [1] * len(steps), [
        dict(c.stalls_by_kind) for c in counters
    ]
    assert all(dict(c.stalls_by_kind) == {"Tensor.tolist": 1} for c in counters)


def test_a_failed_verify_capture_runs_the_step_eagerly(tiny_pair, monkeypatch, caplog):
    """The first step's loop is captured (stand-in), its verify side's capture really fails (a
    CPU has no CUDA stream): one logged line, capture_failed, the eager path's tokens."""
    from cactus_bench.engine.step_graphs import StepGraphs

    real, captures = StepGraphs._capture, []

    def first_only(self, fn, state):
        captures.append(fn)
        return (_fake_capture if len(captures) == 1 else real)(self, fn, state)

    rule = make_sampler("sps")
    eager, *_ = _graphed_run(tiny_pair, monkeypatch, rule, RAGGED, 4, False)
    graphs = StepGraphs(torch.device("cpu"))
    monkeypatch.setattr(StepGraphs, "_capture", first_only)
    drafter, verifier, tokenizer = tiny_pair
    decoder = SpeculativeDecoder(drafter, verifier, tokenizer, rule, 3, PAPER_SAMPLING, [])
    monkeypatch.setattr(decoder, "step_graphs", lambda caches, slots: graphs)
    with caplog.at_level(logging.WARNING, logger="cactus_bench.engine.step_graphs"):
        records = decoder.generate_batch(RAGGED, batch=4)
    stats = decoder.device_stats()
    assert [r.output_ids for r in records] == [r.output_ids for r in eager]
    assert len(captures) == 2 and graphs.failed is not None
    assert [r.levelname for r in caplog.records] == ["WARNING"]  # one line
    assert stats["capture_failed"] is True and stats["graph_replays"] == 1  # the first loop
    assert stats["phase_ms"]["rule"] is not None  # no step ran its rule inside a graph


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("rule_name", ["sps", "guarded"])
def test_with_graphs_a_step_is_two_replays(tiny_pair, rule_name):
    """CPU proxies: test_the_device_step_traces_whole, test_a_replayed_step_..."""
    drafter, verifier, tokenizer = tiny_pair
    models = []
    for model in (drafter, verifier):
        copy = type(model)(model.config).cuda().eval()
        copy.load_state_dict(model.state_dict())
        models.append(copy)
    rule = _rule(rule_name)
    decoder = SpeculativeDecoder(
        *models, tokenizer, rule, 3, PAPER_SAMPLING, [], device="cuda", cuda_graphs="on"
    )
    requests = [BatchRequest(list(p), 12, seed=i) for i, p in enumerate(PROMPTS * 2)]
    decoder.generate_batch(requests, batch=4)
    stats = decoder.device_stats()
    steps = [s for s in decoder.step_log if s.kind == "decode"]
    assert stats["capture_failed"] is False and stats["eager_forwards"] == 0
    assert stats["graph_replays"] == sum(1 + (max(s.drafts) > 0) for s in steps)
    assert stats["phase_ms"]["draft"] > 0 and stats["phase_ms"]["verify"] > 0
    assert stats["phase_ms"]["rule"] is None  # inside the verify graph, timed with it
