"""The GPU proxies of `make bench`, counted on a CPU: aten ops and stalls per forward, per rule
`verify`, and per engine step (results/bench/step_ops.csv).

An eager aten op costs ~19 us of launch on the lent H200 whatever its size, and a host read is a
synchronisation (bench/op_count.py), so these counts say what a step costs a GPU before any GPU
runs it. Measured on the tiny pair (their counts depend on the code path, not on the sizes,
except that a forward's ops grow with its layers: per-layer counts are given too):
- forward: one batched forward of B rows, eager (`BatchRunner.forward`) and static (what a CUDA
  graph captures, `static_forward`); static rows add `kernels_per_layer`, the launches per layer
  of that forward compiled by inductor on the GPU path's merged products (bench/layer_kernels.py);
- verify: each catalogue rule's `verify` as the engine calls it (`uniforms=`, `check=False`);
- step: one decode step of the batched engine (the verifier alone, SpS, Cactus) at batch B and
  m drafts, a middle step of a run (not the first nor the last): its stalls by kind (host_reads,
  host_writes, syncs; `stalls` their sum, one is the step's result), its forwards (each one
  graph replay when CUDA graphs are on) and `eager_ops_outside_forwards`, the aten ops between
  them (draws, laws, the rule, bookkeeping: eager launches on a GPU unless captured).

Columns come from `_row` plus each kind's extras: a new column is one more key in a row.
"""

from __future__ import annotations

import torch

from cactus_bench.bench.layer_kernels import inductor_kernels_per_layer
from cactus_bench.bench.op_count import OpCounter, compiles_fullgraph, count_ops
from cactus_bench.engine import AutoregressiveDecoder, BatchRequest, SpeculativeDecoder
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.sampling import PAPER_SAMPLING, process_logits
from cactus_bench.samplers import make_sampler

PROMPT = [5, 6, 7, 8, 9]


def forward_counts(model, batch: int, num_new: int) -> list[dict]:
    """Rows for one batched forward, eager and static, with ops per decoder layer."""
    runner = BatchRunner(FastRunner(model, torch.device("cpu"), linear_kernel="aten"))
    layers = model.config.num_hidden_layers
    cache = runner.new_cache(batch, 64)
    ids = torch.zeros((batch, num_new), dtype=torch.long)
    counts = torch.full((batch,), num_new)
    rows = []
    with torch.inference_mode():
        for path, forward in (("eager", runner.forward), ("static", runner.static_forward)):
            counter, _ = count_ops(forward, ids, counts, cache, num_new > 1)
            cache.lengths.zero_()
            extra = {"ops_per_layer": counter.ops / layers}
            if path == "static":
                extra["kernels_per_layer"] = inductor_kernels_per_layer(model, batch, num_new)[
                    "kernels"
                ]
            rows.append(_row("forward", path, batch, num_new, counter, **extra))
    return rows


def verify_counts(rule_names, batch: int, m: int, vocab: int = 64) -> list[dict]:
    """Rows for each rule's `verify` on the paper's processed laws of random logits, called as
    the engine calls it, with whether it traces into one graph (`compiles_fullgraph`)."""
    generator = torch.Generator().manual_seed(0)
    draft = process_logits(torch.randn((batch, m, vocab), generator=generator), PAPER_SAMPLING)
    target = process_logits(torch.randn((batch, m + 1, vocab), generator=generator), PAPER_SAMPLING)
    ids = torch.multinomial(draft.view(-1, vocab), 1, generator=generator).view(batch, m)
    draws = torch.rand((batch, m + 1), generator=generator, dtype=torch.float64)
    rows = []
    for name in rule_names:
        rule = make_sampler(name)
        extra = {}
        if getattr(rule, "reads_unscaled", False):
            extra = {"unscaled_draft_probs": draft, "unscaled_target_probs": target}

        def call(rule=rule, extra=extra):
            return rule.verify(ids, draft, target, uniforms=draws, check=False, **extra)

        with torch.inference_mode():
            counter, _ = count_ops(call)
            traced, reason = compiles_fullgraph(call)
        rows.append(_row("verify", name, batch, m, counter, fullgraph=traced, reason=reason))
    return rows


def step_counts(drafter, verifier, tokenizer, arm: str, batch: int, m: int) -> dict:
    """The row of one middle decode step of the batched engine at `batch` rows."""
    if arm == "verifier":
        decoder = AutoregressiveDecoder(verifier, tokenizer, PAPER_SAMPLING, [])
    else:
        rule = make_sampler(arm, **({"delta": 1.0} if arm == "cactus" else {}))
        decoder = SpeculativeDecoder(drafter, verifier, tokenizer, rule, m, PAPER_SAMPLING, [])
    step = type(decoder).batch_step
    counters: list[OpCounter] = []

    def counting_step(run, rows):
        counter = OpCounter()
        saved = {name: getattr(BatchRunner, name) for name in ("forward", "static_forward")}
        for name, method in saved.items():
            setattr(BatchRunner, name, counter.forwards(method))
        try:
            with counter:
                emitted = step(decoder, run, rows)
        finally:
            for name, method in saved.items():
                setattr(BatchRunner, name, method)
        counters.append(counter)
        return emitted

    decoder.batch_step = counting_step
    requests = [BatchRequest(PROMPT, 4 * (m + 1), seed=i) for i in range(batch)]
    decoder.generate_batch(requests, batch=batch)
    counter = counters[len(counters) // 2]
    return _row(
        "step",
        arm,
        batch,
        m if arm != "verifier" else 0,
        counter,
        forwards=counter.forward_calls,
        eager_ops_outside_forwards=counter.ops_outside_forwards,
    )


def _row(kind: str, name: str, batch: int, size: int, counter: OpCounter, **extra) -> dict:
    return {
        "kind": kind,
        "name": name,
        "batch": batch,
        "size": size,  # forward: new tokens n; verify and step: m
        "aten_ops": counter.ops,
        "host_reads": counter.host_reads,
        "reads_by_op": ";".join(f"{op}={n}" for op, n in sorted(counter.reads_by_op.items())),
        "host_writes": counter.host_writes,
        "syncs": counter.syncs,
        "stalls": counter.stalls,
        "stalls_by_kind": ";".join(f"{k}={n}" for k, n in sorted(counter.stalls_by_kind.items())),
        **extra,
    }
