"""What CUDA graphs rely on, checked on a CPU (engine/cuda_graphs.py, BatchRunner): graphs keyed
on every address they captured, no single-row cache beside the batched one, and a smaller
later wave served by the full-width cache and graphs without a new capture.

A CPU has no CUDA graphs: `_capture` is replaced by a twin whose "replay" runs the static
forward into the same static output, so the engine's graph path (every slot fed, the kept
cache, the capture bookkeeping) runs as on a GPU."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.engine import BatchRequest, SpeculativeDecoder
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.cuda_graphs import CapturedForward, GraphedRunner
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.models.tiny import make_tiny_pair
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")
CPU = torch.device("cpu")
SIZES = [(1, False), (3, True)]


class _Replay:
    """A CPU twin of a captured graph: `replay()` runs the forward into the static logits."""

    def __init__(self, forward, input_ids, counts, cache, all_logits):
        self.call = lambda: forward(input_ids, counts, cache, all_logits)
        self.logits = None

    def replay(self):
        self.logits.copy_(self.call())


@pytest.fixture
def captures(monkeypatch) -> list[tuple]:
    """Every (rows, n, all_logits) a GraphedRunner captured, on the CPU twin."""
    done = []

    def capture(self, key, cache, rows, num_new, all_logits):
        input_ids = torch.zeros((rows, num_new), dtype=torch.long)
        counts = torch.zeros(rows, dtype=torch.long)
        graph = _Replay(self.runner.static_forward, input_ids, counts, cache, all_logits)
        lengths = cache.lengths.clone()
        graph.logits = graph.call()
        cache.lengths.copy_(lengths)
        self._graphs[key] = CapturedForward(graph, input_ids, counts, graph.logits)
        done.append(key)

    monkeypatch.setattr(GraphedRunner, "_capture", capture)
    return done


def test_a_batched_cache_allocates_no_single_row_cache():
    _, model, _ = make_tiny_pair(seed=0)
    single = FastRunner(model, CPU, linear_kernel="aten")
    BatchRunner(single).new_cache(4, 300)
    assert single._storage is None  # no [1, H_kv, capacity, D] buffers beside the batched ones


def test_graphs_are_keyed_on_every_captured_address(captures):
    _, model, _ = make_tiny_pair(seed=0)
    single = FastRunner(model, CPU, linear_kernel="aten")
    runner = BatchRunner(single)
    cache = runner.new_cache(2, 64, keep=True)
    graphs = GraphedRunner(runner)
    graphs.capture(cache, SIZES)
    graphs.capture(cache, SIZES)
    assert len(captures) == 2  # captured once
    single.new_cache(4096)  # the single-row runner rebuilds its own tables: nothing moves here
    graphs.capture(cache, SIZES)
    assert len(captures) == 2
    with torch.no_grad():  # a replaced weight moves an address the graphs read
        model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.clone())
    graphs.capture(cache, SIZES)
    assert len(captures) == 4
    # Rotary tables rebuilt (new addresses): no replay of graphs that read the old ones.
    runner.rope_cos_sin = tuple(table.clone() for table in runner.rope_cos_sin)
    replayed = []
    for captured in graphs._graphs.values():
        captured.graph.replay = lambda: replayed.append(1)
    ids, counts = torch.zeros((2, 1), dtype=torch.long), torch.ones(2, dtype=torch.long)
    with torch.inference_mode():
        graphs.forward(ids, counts, cache, all_logits=False)
    assert not replayed
    graphs.capture(cache, SIZES)
    assert len(captures) == 6


def test_a_smaller_wave_reuses_the_full_width_cache_and_graphs(captures):
    drafter, verifier, tokenizer = make_tiny_pair(seed=0)

    def decoder():
        rule = make_sampler("sps")
        return SpeculativeDecoder(drafter, verifier, tokenizer, rule, 3, eos_token_ids=[])

    graphed = decoder()
    graphed.cuda_graphs = True  # the graph path, on the CPU twin
    eager = decoder()
    waves = [[BatchRequest([5, 6, 7], 9, seed=seed) for seed in range(4)]]
    waves.append([BatchRequest([8, 9], 7, seed=seed) for seed in (10, 11)])
    graphed.generate_batch(waves[0], batch=4)
    caches = {name: runner._kept for name, runner in graphed._batch_runner_cache.items()}
    first = len(captures)
    assert first == 3  # drafter (1, 2 tokens), verifier (m + 1)
    smaller = graphed.generate_batch(waves[1], batch=4)  # 2 requests: 2 slots
    assert len(captures) == first  # nothing captured again
    for name, runner in graphed._batch_runner_cache.items():
        assert runner._kept is caches[name]
        assert runner._kept.lengths.shape[0] == 4
    expected = eager.generate_batch(waves[1], batch=4)
    assert [r.output_ids for r in smaller] == [r.output_ids for r in expected]


def test_the_fused_forward_is_what_engine_compile_asks_for_and_falls_back(monkeypatch):
    """GraphedRunner compiles the static forward when the runner was compiled (engine.compile
    resolved on); a capture that fails fused is tried again eager (on a CPU that fails too)."""
    _, model, _ = make_tiny_pair(seed=0)
    plain = GraphedRunner(BatchRunner(FastRunner(model, CPU, linear_kernel="aten")))
    assert plain.fused is False
    compiled = BatchRunner(FastRunner(model, CPU, compile=True, linear_kernel="aten"))
    graphs = GraphedRunner(compiled)
    assert graphs.fused is True
    tries = []
    original = GraphedRunner._capture

    def counting(self, *args):
        tries.append(self.fused)
        return original(self, *args)

    monkeypatch.setattr(GraphedRunner, "_capture", counting)
    graphs.capture(compiled.new_cache(1, 64, keep=True), [(1, False)])
    assert tries == [True, False]  # fused first, then eager
    assert graphs.fused is False and graphs.failed is not None
