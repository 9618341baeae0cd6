"""The GPU proxies hold on a CPU: a batched decode step stalls once (its result's read) at any
batch and m, its eager work between forwards grows boundedly with m, the engine's rules read
nothing, and the captured forward traces whole (bench/step_ops.py). These count real runs of the
code, so a per-row `int(tensor)`, a `torch.tensor(list)`, a `synchronize` or a data-dependent
shape brought back into a step fails them; the counter is shown to see each kind."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.bench.op_count import OpCounter, compiles_fullgraph
from cactus_bench.bench.step_ops import step_counts, verify_counts

pytestmark = pytest.mark.usefixtures("single_thread")


# Eager aten ops between a step's forwards, per draft (the processed law, the draw, the flags,
# the rule's extra column): measured 52 at batch 1 on the tiny pair (193 when every draft drew
# its own uniforms, built its inputs from host lists and rolled back from the host).
OPS_PER_DRAFT = 60


@pytest.mark.parametrize(("arm", "m"), [("verifier", 3), ("sps", 3), ("sps", 10), ("cactus", 10)])
@pytest.mark.parametrize("batch", [1, 8])
def test_a_decode_step_stalls_once(tiny_pair, arm, m, batch):
    row = step_counts(*tiny_pair, arm, batch, m=m)
    assert row["stalls"] == 1, row["stalls_by_kind"]
    assert row["stalls_by_kind"] == "Tensor.tolist=1"  # the step's result, in one copy
    assert row["forwards"] == (1 if arm == "verifier" else m + 1)


@pytest.mark.parametrize("batch", [1, 8])
def test_a_guarded_step_stalls_once(tiny_pair, monkeypatch, batch):
    """Cactus with strict_first and relax_in = think (stand-in think ids the prompt opens):
    the relax mask, the think state and the out-of-head count ride on the step's one read."""
    from cactus_bench.bench import step_ops
    from cactus_bench.samplers import make_sampler
    from cactus_bench.tasks.stop_set import StopSet

    plain = step_counts(*tiny_pair, "cactus", batch, m=3)
    rule = make_sampler("cactus", delta=1.0, strict_first=4, relax_in="think")
    rule.vocab_stop_set = StopSet(stop_ids=(0,), think_open=7, think_close=4)  # PROMPT opens
    monkeypatch.setattr(step_ops, "make_sampler", lambda name, **params: rule)
    row = step_counts(*tiny_pair, "cactus", batch, m=3)
    assert row["stalls"] == 1, row["stalls_by_kind"]
    assert row["stalls_by_kind"] == "Tensor.tolist=1"
    assert row["aten_ops"] > plain["aten_ops"]  # the mask and the think state were built


def test_eager_work_between_forwards_grows_boundedly_with_m(tiny_pair):
    few, many = (step_counts(*tiny_pair, "sps", 1, m=m) for m in (3, 10))
    per_draft = (many["eager_ops_outside_forwards"] - few["eager_ops_outside_forwards"]) / 7
    assert 0 < per_draft <= OPS_PER_DRAFT, per_draft


@pytest.mark.parametrize("rule", ["sps", "cactus", "tas", "greedy"])
def test_the_engine_s_rules_read_nothing_and_trace_whole(rule):
    row = verify_counts([rule], batch=8, m=3)[0]
    assert row["host_reads"] == 0, row["reads_by_op"]
    assert row["fullgraph"], row["reason"]


def _stalls(plant) -> tuple[int, dict]:
    with OpCounter() as counter:
        plant()
    return counter.stalls, dict(counter.stalls_by_kind)


@pytest.mark.parametrize(
    ("plant", "kind"),
    [
        (lambda t: int(t[0]), "aten._local_scalar_dense.default"),
        (lambda t: bool(t[1]), "aten._local_scalar_dense.default"),
        (lambda t: t.sum().item(), "aten._local_scalar_dense.default"),
        (lambda t: t.tolist(), "Tensor.tolist"),
        (lambda t: t.nonzero(), "aten.nonzero.default"),
        (lambda t: torch.tensor([1, 2]), "aten.lift_fresh.default"),
        (lambda t: t.new_tensor([3.0]) + t[:1], "aten.lift_fresh.default"),
        (lambda t: t.__setitem__(2, 7.0), "aten.lift_fresh.default"),
        (lambda t: torch.cuda.synchronize(), "torch.cuda.synchronize"),
        (lambda t: torch.cuda.Event.synchronize(None), "Event.synchronize"),
        (lambda t: torch.cuda.Stream.synchronize(None), "Stream.synchronize"),
    ],
)
def test_the_counter_sees_each_kind_of_stall(plant, kind):
    values = torch.arange(6.0)
    stalls, kinds = _stalls(lambda: plant(values))
    assert (stalls, kinds) == (1, {kind: 1})
    assert _stalls(lambda: values * 2 + values.new_zeros(6))[0] == 0  # device work: none


def test_a_copy_of_host_data_onto_a_device_counts_once():
    from cactus_bench.bench.op_count import _copied_from_host

    host = torch.arange(3)
    device = torch.empty(3, device="meta")
    assert _copied_from_host("aten._to_copy.default", (host,), {"device": "cuda"}) is host
    assert _copied_from_host("aten._to_copy.default", (host,), {"device": "cpu"}) is None
    assert _copied_from_host("aten.copy_.default", (host, host), {}) is None
    assert _copied_from_host("aten.copy_.default", (device, host), {}) is None  # meta: no data


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
