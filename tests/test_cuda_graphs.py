"""Whole forwards as CUDA graphs (engine/cuda_graphs.py) and the static forward they capture.

On any machine: the static forward (`BatchRunner.static_forward`: whole buffer, no host read)
gives the eager batched forward's logits, makes no host read, and traces into one aten graph
with `torch.compile(fullgraph=True, dynamic=False)` (the CPU proof it can be captured). With
CUDA only: a replay gives the eager forward's logits, and the batched engine decodes the same
greedy tokens with graphs on and off."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.bench.op_count import compiles_fullgraph, count_ops
from cactus_bench.engine import (
    AutoregressiveDecoder,
    BatchRequest,
    SamplingParams,
    SpeculativeDecoder,
)
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.cuda_graphs import GraphedRunner, resolve_cuda_graphs
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _runner(model, device="cpu") -> BatchRunner:
    return BatchRunner(FastRunner(model, torch.device(device), linear_kernel="aten"))


def _prefilled(runner: BatchRunner, prompts: list[list[int]]):
    cache = runner.new_cache(len(prompts), 64)
    for slot, prompt in enumerate(prompts):
        runner.prefill(cache, slot, prompt)
    return cache


# Three slots at different lengths; the middle one is fed nothing (an empty or finished slot).
PROMPTS = [[5, 9, 2, 7], [3], [8, 1, 4, 4, 6, 2, 9]]
INPUTS = torch.tensor([[11, 12, 13], [0, 0, 0], [21, 22, 0]])
COUNTS = torch.tensor([3, 0, 2])


@pytest.mark.parametrize("all_logits", [True, False])
def test_static_forward_gives_the_eager_logits(tiny_pair, all_logits):
    _, verifier, _ = tiny_pair
    runner = _runner(verifier)
    eager_cache, static_cache = _prefilled(runner, PROMPTS), _prefilled(runner, PROMPTS)
    with torch.inference_mode():
        eager = runner.forward(INPUTS, COUNTS, eager_cache, all_logits)
        static = runner.static_forward(INPUTS, COUNTS, static_cache, all_logits)
    assert torch.equal(eager_cache.lengths, torch.tensor([7, 1, 9]))
    assert torch.equal(static_cache.lengths, eager_cache.lengths)
    real = [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1)] if all_logits else [(0, 0), (2, 0)]
    for row, position in real:
        torch.testing.assert_close(static[row, position], eager[row, position])


def test_static_forward_reads_nothing_and_traces_whole(tiny_pair):
    _, verifier, _ = tiny_pair
    runner = _runner(verifier)
    cache = _prefilled(runner, PROMPTS)
    with torch.inference_mode():
        counter, _ = count_ops(runner.static_forward, INPUTS, COUNTS, cache, True)
        eager_counter, _ = count_ops(runner.forward, INPUTS, COUNTS, cache, True)
    assert counter.host_reads == 0, dict(counter.reads_by_op)
    assert eager_counter.host_reads >= 1  # the proxy sees the eager forward's read
    traced, reason = compiles_fullgraph(runner.static_forward, INPUTS, COUNTS, cache, False)
    assert traced, reason


def test_the_setting_is_checked():
    assert resolve_cuda_graphs("auto", torch.device("cpu")) is False
    assert resolve_cuda_graphs("off", torch.device("cpu")) is False
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_cuda_graphs("on", torch.device("cpu"))
    with pytest.raises(ValueError, match="one of auto, on, off"):
        resolve_cuda_graphs("yes", torch.device("cpu"))


def test_graphs_on_refuse_a_cpu_decoder(tiny_pair):
    _, verifier, tokenizer = tiny_pair
    with pytest.raises(ValueError, match="needs a CUDA device"):
        AutoregressiveDecoder(verifier, tokenizer, cuda_graphs="on")
    assert AutoregressiveDecoder(verifier, tokenizer).cuda_graphs is False


@needs_cuda
@pytest.mark.parametrize("all_logits", [True, False])
def test_a_replay_gives_the_eager_logits(tiny_pair, all_logits):
    _, verifier, _ = tiny_pair
    model = type(verifier)(verifier.config).cuda().eval()
    model.load_state_dict(verifier.state_dict())
    runner = _runner(model, "cuda")
    graphed = GraphedRunner(runner)
    eager_cache = _prefilled(runner, PROMPTS)
    graph_cache = runner.new_cache(len(PROMPTS), 64, keep=True)
    for slot, prompt in enumerate(PROMPTS):
        runner.prefill(graph_cache, slot, prompt)
    inputs, counts = INPUTS.cuda(), COUNTS.cuda()
    with torch.inference_mode():
        assert graphed.capture(graph_cache, [(3, all_logits)]) > 0
        assert graphed.failed is None, graphed.failed
        assert torch.equal(graph_cache.lengths.cpu(), torch.tensor([4, 1, 7]))  # untouched
        eager = runner.forward(inputs, counts, eager_cache, all_logits)
        replayed = graphed.forward(inputs, counts, graph_cache, all_logits).clone()
    assert torch.equal(graph_cache.lengths, eager_cache.lengths)
    real = [(0, 0), (0, 1), (0, 2), (2, 0), (2, 1)] if all_logits else [(0, 0), (2, 0)]
    for row, position in real:
        torch.testing.assert_close(replayed[row, position], eager[row, position])


@needs_cuda
def test_the_engine_decodes_the_same_tokens_with_graphs(tiny_pair):
    drafter, verifier, tokenizer = tiny_pair
    models = []
    for model in (drafter, verifier):
        copy = type(model)(model.config).cuda().eval()
        copy.load_state_dict(model.state_dict())
        models.append(copy)
    greedy = SamplingParams(temperature=0.0)
    requests = [BatchRequest(prompt, 12, seed=i) for i, prompt in enumerate(PROMPTS * 2)]
    tokens = {}
    for mode in ("off", "on"):
        rule = make_sampler("sps")
        decoder = SpeculativeDecoder(
            *models, tokenizer, rule, 3, sampling=greedy, device="cuda", cuda_graphs=mode
        )
        records = decoder.generate_batch(requests, batch=4)
        tokens[mode] = [record.output_ids for record in records]
        if mode == "on":
            assert decoder.graph_capture_s > 0
    assert tokens["on"] == tokens["off"]
