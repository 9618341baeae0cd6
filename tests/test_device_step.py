"""The speculative step's device part (engine/device_step.py, slot_state.py) is tensor-only: the
drafter loop, the verifier's forward, the rule and the roll-back trace into one graph with no
host read or data-dependent shape (the CPU proof that a CUDA graph can capture them); the step's
draws come from one call with the keys of the per-stream calls; and the decoders report the
counters the GPU records read (`device_stats`)."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.bench.op_count import OpCounter, compiles_fullgraph
from cactus_bench.engine import BatchRequest, SpeculativeDecoder
from cactus_bench.engine.commit_stats import step_out_of_head
from cactus_bench.engine.device_step import GuardState, RuleGroup, apply_rules, draft_loop
from cactus_bench.engine.draws import ACCEPT, DRAFT, LAST, request_keys, step_uniforms, uniforms
from cactus_bench.engine.sampling import PAPER_SAMPLING, process_logits
from cactus_bench.engine.slot_state import SlotState
from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.guards import ThinkIds
from cactus_bench.tasks.stop_set import StopSet

pytestmark = pytest.mark.usefixtures("single_thread")
PROMPTS = ([5, 6, 7, 8, 9], [11, 12, 13])
THINK = (7, 12)  # stand-ins for <think>, </think>: the first prompt opens it, the second closes


def _rule(name: str):
    """A rule by name; "guarded": Cactus with both per-position guards, on THINK's ids."""
    if name != "guarded":
        return make_sampler(name)
    rule = make_sampler("cactus", delta=1.0, strict_first=4, relax_in="think")
    rule.vocab_stop_set = StopSet(stop_ids=(0,), think_open=THINK[0], think_close=THINK[1])
    return rule


def _device_step(tiny_pair, rule_name: str, m: int):
    """(step, its runners' caches): one speculative step over two prefilled slots, as the
    engine runs it but on the static forwards (what a CUDA graph captures), with the guards'
    mask and think state and the out-of-head count."""
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
        ids = torch.cat([state.verifier_id[:, None], out.ids], dim=1)
        logits = runners["verifier"].static_forward(ids, 1 + drafts, caches["verifier"], True)
        target = process(logits)
        groups = [RuleGroup(rule, m, None, None, False)]
        guard = GuardState(state.answer_offsets, state.in_think, think)
        emitted = apply_rules(groups, out, target, logits, draws, state.greedy, m, guard)
        off_head = step_out_of_head(target, out.ids, emitted, 0.2)
        state.advance(emitted, drafts, same, caches, think)
        return emitted, out.bad, off_head

    return step, caches, slots


@pytest.mark.parametrize("rule", ["sps", "cactus", "guarded"])
def test_the_device_step_traces_whole(tiny_pair, rule):
    step, _, _ = _device_step(tiny_pair, rule, m=3)
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
    drafts, draws, out = outputs
    return [drafts, draws, out.ids, *out.probs, *out.unscaled, out.bad]


@pytest.mark.parametrize("rule_name", ["cactus", "guarded"])
def test_a_replayed_draft_loop_decodes_the_eager_tokens(tiny_pair, monkeypatch, rule_name):
    """The captured path's host side (keys, the host's cache lengths, static outputs read after
    each replay, the counters) on a CPU, with a graph that re-runs the loop on replay."""
    from cactus_bench.engine.step_graphs import StepGraphs

    def fake_capture(self, fn, state):
        saved = [tensor.clone() for tensor in state]
        graph = _ReplayedGraph(fn)
        graph.outputs = fn()  # capture allocates the static outputs; the state is put back
        for tensor, value in zip(state, saved, strict=True):
            tensor.copy_(value)
        return graph, graph.outputs

    drafter, verifier, tokenizer = tiny_pair
    requests = [BatchRequest([5, 6, 7, 8][: 2 + i % 3], 11, seed=i) for i in range(5)]
    sampled = {}
    for captured in (False, True):
        rule = make_sampler("cactus", delta=1.0) if rule_name == "cactus" else _rule(rule_name)
        decoder = SpeculativeDecoder(drafter, verifier, tokenizer, rule, 3, PAPER_SAMPLING, [])
        if captured:
            graphs = StepGraphs(torch.device("cpu"))
            monkeypatch.setattr(StepGraphs, "_capture", fake_capture)
            monkeypatch.setattr(decoder, "step_graphs", lambda caches, slots, graphs=graphs: graphs)
        records = decoder.generate_batch(requests, batch=3)
        sampled[captured] = [record.output_ids for record in records]
        steps = [s for s in decoder.step_log if s.kind == "decode"]
    assert sampled[True] == sampled[False]
    stats = decoder.device_stats()
    drafting = sum(max(step.drafts) > 0 for step in steps)
    assert stats["graph_replays"] == drafting > 0  # one replay a drafting step
    assert stats["eager_forwards"] == len(steps)  # the verifier's (no forward graphs here)
    assert len(graphs._graphs) >= 1 and graphs.capture_s > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("rule_name", ["sps", "guarded"])
def test_with_graphs_a_step_is_two_replays(tiny_pair, rule_name):
    """CPU proxies: test_the_device_step_traces_whole, test_a_replayed_draft_loop_..."""
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
