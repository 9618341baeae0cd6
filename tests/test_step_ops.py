"""The GPU proxies hold on a CPU: a batched decode step reads the host once at any batch, the
engine's rules read it never, and the captured forward traces whole (bench/step_ops.py). These
count real runs of the code, so a per-row `int(tensor)` or a data-dependent shape brought back
into a step fails them; each also checks that the counter sees such a read."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.bench.op_count import OpCounter, compiles_fullgraph
from cactus_bench.bench.step_ops import step_counts, verify_counts

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("arm", ["verifier", "sps", "cactus"])
@pytest.mark.parametrize("batch", [1, 8])
def test_a_decode_step_reads_the_host_once(tiny_pair, arm, batch):
    row = step_counts(*tiny_pair, arm, batch, m=3)
    assert row["host_reads"] == 1, row["reads_by_op"]
    assert row["reads_by_op"] == "Tensor.tolist=1"  # the step's result, in one copy


@pytest.mark.parametrize("rule", ["sps", "cactus", "tas", "greedy"])
def test_the_engine_s_rules_read_nothing_and_trace_whole(rule):
    row = verify_counts([rule], batch=8, m=3)[0]
    assert row["host_reads"] == 0, row["reads_by_op"]
    assert row["fullgraph"], row["reason"]


def test_the_counters_see_host_reads():
    values = torch.arange(6.0)
    with OpCounter() as counter:
        int(values[2])
        values.tolist()
        values.nonzero()
        (values * 2).sum()
    assert counter.host_reads == 3
    assert counter.ops >= 5
    assert compiles_fullgraph(lambda x: x * 2 + 1, values) == (True, "")
    for reads in (lambda x: x[x > 2], lambda x: x * int(x.sum()), lambda x: x.nonzero()):
        traced, reason = compiles_fullgraph(reads, values)
        assert not traced and reason
