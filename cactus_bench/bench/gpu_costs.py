"""What `make gpu-bench` measures on one GPU: forwards and rules beside their floors.

Model shapes are the paper's (Qwen3-0.6B, 8B, 14B) built from their configs with random weights:
a step's cost depends on shapes, not values. Each figure is a median over timed repeats (CUDA
events) with its quartiles, beside its floor (`floor_s`): the bytes the step must stream (the
weights a decode step reads, `decode_bytes`, or the laws a rule reads) over the card's measured
copy bandwidth, the same bandwidth for both.

- `copy_bandwidth`: device-to-device copy of a 2 GiB buffer, bytes read + written per second.
- `forward_costs`: one batched forward (`BatchRunner.static_forward`) per rows B and new tokens
  n at a context of `context` tokens, eager and replayed as a CUDA graph (`GraphedRunner`), with
  the capture time.
- `verify_costs`: each rule's `verify` at V = 151,936 on the paper's processed laws, eager and
  (some settings) compiled by inductor, the compile refused when its graph keeps no op
  (gpu_compiled.py).
The engine end to end is gpu_engine.py; the forecast from these costs, gpu_forecast.py.
"""

from __future__ import annotations

import gc
import statistics
import time

import torch

from cactus_bench.bench.gpu_compiled import compile_checked
from cactus_bench.engine.batch_cache import BatchRunner
from cactus_bench.engine.cuda_graphs import GraphedRunner
from cactus_bench.engine.fast_runner import FastRunner
from cactus_bench.engine.sampling import PAPER_SAMPLING, process_logits
from cactus_bench.samplers import make_sampler


def timed(call, repeats: int, device: torch.device) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile) seconds of `call()` after two warm-up calls: CUDA events
    on a GPU, perf_counter elsewhere."""
    for _ in range(2):
        call()
    samples = []
    for _ in range(max(2, repeats)):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            begin = time.perf_counter()
            call()
            samples.append(time.perf_counter() - begin)
    quartiles = statistics.quantiles(samples, n=4)
    return statistics.median(samples), quartiles[0], quartiles[2]


def copy_bandwidth(device: torch.device, gib: float = 2.0, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy (read + write counted)."""
    source = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    median, _, _ = timed(lambda: target.copy_(source), repeats, device)
    return 2 * source.numel() / median


def decode_bytes(model: torch.nn.Module) -> int:
    """Bytes a decode step streams: every parameter once (a tied head counted once), less an
    untied input embedding, of which a step reads one row per token (Qwen3-8B: 1.2 GB of its
    16.4 GB; a tied embedding is the output head, read whole)."""
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == embedding.data_ptr()
    seen, total = set() if tied else {embedding.data_ptr()}, 0
    for param in model.parameters():
        if param.data_ptr() not in seen:
            seen.add(param.data_ptr())
            total += param.numel() * param.element_size()
    return total


def floor_s(streamed_bytes: int, bandwidth: float) -> float:
    """Seconds to stream `streamed_bytes` once at `bandwidth` (copy_bandwidth's bytes a second):
    the floor of a forward (its decode_bytes) and of a rule (the laws it reads) alike."""
    return streamed_bytes / bandwidth


def forward_costs(
    model, device, rows_grid, sizes, context: int, repeats: int, graphs: bool, fused_rows=()
):
    """Rows (dicts) of one forward's cost per (rows, n, path) at `context` cached tokens.
    fused_rows: row counts also timed as "fused+graph" (inductor-compiled, then captured)."""
    runner = BatchRunner(FastRunner(model, device, linear_kernel="aten"))
    vocab = model.config.vocab_size
    out = []
    for rows in rows_grid:
        # One cache and one set of graphs per row count, freed before the next (the 14B shape
        # at 64 rows holds ~11 GB of cache).
        graphed = GraphedRunner(runner) if graphs else None
        runner.drop_kept()
        release(device)
        cache = runner.new_cache(rows, context + max(sizes) + 1, keep=graphed is not None)
        cache.lengths.fill_(context)  # random KV content: the cost depends on shapes only
        for num_new in sizes:
            ids = torch.randint(vocab, (rows, num_new), device=device)
            counts = torch.full((rows,), num_new, dtype=torch.long, device=device)
            inputs = (ids, counts, cache, num_new > 1)
            eager = at_context(runner.static_forward, inputs, context)
            out.append(_forward_row("eager", rows, num_new, timed(eager, repeats, device), 0.0))
            if graphed is None:
                continue
            capture_s = graphed.capture(cache, [(num_new, num_new > 1)])
            if graphed.failed is not None:
                row = _forward_row("graph", rows, num_new, (None, None, None), capture_s)
                out.append({**row, "note": graphed.failed})
                continue
            replay = at_context(graphed.forward, inputs, context)
            spread = timed(replay, repeats, device)
            out.append(_forward_row("graph", rows, num_new, spread, capture_s))
            if rows in fused_rows and num_new == 1:  # each compile takes ~a minute
                out.append(_fused_row(runner, inputs, rows, num_new, context, repeats))
        del graphed, cache, inputs
    runner.drop_kept()
    release(device)
    return out


def release(device) -> None:
    """Frees what the last shape left cached (graphs' pools, caches) before the next."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _fused_row(runner, inputs, rows: int, num_new: int, context: int, repeats: int) -> dict:
    """The same forward compiled by inductor, then captured: what fusing the forward's ~45
    kernels a layer into fewer would buy (the engine does not do this yet)."""
    fused = GraphedRunner(runner, fused=True)
    began = time.perf_counter()
    fused.capture(inputs[2], [(num_new, inputs[3])])
    capture_s = time.perf_counter() - began
    if fused.failed is not None:
        row = _forward_row("fused+graph", rows, num_new, (None, None, None), capture_s)
        return {**row, "note": fused.failed}
    spread = timed(at_context(fused.forward, inputs, context), repeats, runner.device)
    return _forward_row("fused+graph", rows, num_new, spread, capture_s)


def at_context(forward, inputs, context: int):
    """A call of forward(*inputs) that puts the cache back at `context` tokens after it."""

    def call():
        forward(*inputs)
        inputs[2].lengths.fill_(context)

    return call


def _forward_row(path, rows, num_new, spread, capture_s) -> dict:
    median, low, high = spread
    return {
        "path": path,
        "batch": rows,
        "tokens_per_row": num_new,
        "seconds": median,
        "q25_s": low,
        "q75_s": high,
        "capture_s": capture_s,
    }


def paper_laws(rows: int, positions: int, vocab: int, device, generator) -> torch.Tensor:
    """[rows, positions, V] float32: the paper's processed law (T 0.6, top-k 20, top-p 0.95) of
    random logits, as a real step hands the rules."""
    logits = 3 * torch.randn((rows, positions, vocab), device=device, generator=generator)
    return process_logits(logits, PAPER_SAMPLING)


def verify_costs(rules, device, vocab, batches, ms, repeats: int, compiled=()):
    """Rows of each rule's `verify` time per (batch, m), called as the engine calls it
    (`uniforms=`, `check=False`), with the bytes of p and q it reads. `compiled`: (rule, batch,
    m) settings also timed under `torch.compile(fullgraph=True, dynamic=False)` (inductor fuses
    the rule into a few kernels), with the compile seconds and the ops the compiled graph kept
    (a graph with none is refused, its row left without a time: gpu_compiled.py)."""
    generator = torch.Generator(device=device).manual_seed(0)
    out = []
    for batch in batches:
        for m in ms:
            draft = paper_laws(batch, m, vocab, device, generator)
            target = paper_laws(batch, m + 1, vocab, device, generator)
            ids = torch.multinomial(draft.view(-1, vocab), 1, generator=generator).view(batch, m)
            draws = torch.rand((batch, m + 1), generator=generator, device=device).double()
            law_bytes = (draft.numel() + target.numel()) * draft.element_size()
            for name, params in rules:
                rule = make_sampler(name, **params)
                call = _verify_call(rule, ids, draft, target, draws)
                row = {"rule": name, **params, "batch": batch, "m": m, "law_bytes": law_bytes}
                out.append({**row, "path": "eager", **_timed_row(call, repeats, device)})
                if (name, batch, m) in compiled:
                    out.append({**row, "path": "compiled", **_compiled_row(call, repeats, device)})
    return out


def _compiled_row(call, repeats: int, device) -> dict:
    try:
        fused, ops, compile_s = compile_checked(call)
    except Exception as error:  # noqa: BLE001 - an empty graph or a failed compile: no time
        note = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return {"seconds": None, "q25_s": None, "q75_s": None, "note": note}
    with torch.inference_mode():  # as verify runs: compiled under the same mode
        timing = _timed_row(fused, repeats, device)
    return {**timing, "compile_s": compile_s, "compiled_ops": ops}


def _timed_row(call, repeats: int, device) -> dict:
    try:
        median, low, high = timed(call, repeats, device)
    except Exception as error:  # noqa: BLE001 - recorded in the row, the run goes on
        note = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return {"seconds": None, "q25_s": None, "q75_s": None, "note": note}
    return {"seconds": median, "q25_s": low, "q75_s": high, "note": ""}


def _verify_call(rule, ids, draft, target, draws):
    extra = {}
    if getattr(rule, "reads_unscaled", False):  # the same laws stand in for temperature 1
        extra = {"unscaled_draft_probs": draft, "unscaled_target_probs": target}

    def call():  # returns its outputs: a compiled call that returned None would keep no op
        out = rule.verify(ids, draft, target, uniforms=draws, check=False, **extra)
        return out.token_ids, out.num_accepted

    return call
