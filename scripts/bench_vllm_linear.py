"""The HF engine's packed oneDNN products against vLLM's CPU `onednn_mm`, on the same weights.

    .venv-vllm/bin/python scripts/bench_vllm_linear.py   # part of `make bench-vllm`

Both run in one process of the vLLM environment (it has this project installed): the engine's
`PackedLinear` (torch's `mkldnn._linear_pointwise` on a weight reordered once) and vLLM's
handler (`create_onednn_mm` / `onednn_mm`, its own build of oneDNN). A sweep is every linear
layer of the verifier's decoder stack (SmolLM2-135M: 30 layers of fused q/k/v, o, fused
gate/up and down, distinct random weights, ~200 MB in bf16, so it streams from memory as a real
forward does), for 1, 3 and 8 rows; the two kernels alternate, one thread, CPU time, median and
quartiles of --repeats sweeps. Then the cost of one call on a tiny product (64 x 576), where the
kernel's work is negligible and what is left is the call's own overhead. The outputs of the two
kernels are compared first, so a timing is never of a wrong product.
Appends to results/bench/vllm_linear.csv (timestamp, commit and whether the checkout was dirty,
CPU, ISA flags); earlier rows are kept.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

import torch

from cactus_bench.bench.linear import SHAPES as MATRICES
from cactus_bench.bench.timing import cpu_times_ms, spread

ROOT = Path(__file__).resolve().parents[1]
LAYERS = 30  # SmolLM2-135M's decoder layers
# (out, in) of each product in one layer, in the order the fast forward runs them (packed)
SHAPES = [
    next((out, inp) for name, out, inp in MATRICES if name == product)
    for product in ("qkv fused", "q|o", "gate_up fused", "down")
]
HIDDEN = SHAPES[1][1]
FIELDS = [
    "timestamp",
    "git_sha",
    "git_dirty",
    "cpu",
    "isa",
    "dtype",
    "case",
    "rows",
    "kernel",
    "stat",
    "value",
]


def sweep(kernel, inputs) -> None:
    """Every product of every layer once: kernel(layer, product, x)."""
    for layer in range(LAYERS):
        for product, x in enumerate(inputs):
            kernel(layer, product, x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/vllm_linear.csv")
    args = parser.parse_args()
    try:
        from vllm import _custom_ops as ops
    except ImportError:
        raise SystemExit(
            "needs vLLM: run it with .venv-vllm/bin/python (make setup-vllm)"
        ) from None

    from cactus_bench.engine.cpu_kernels import PackedLinear, cpu_info
    from cactus_bench.store.metadata import git_state

    torch.set_num_threads(1)
    clock = time.process_time  # the process's CPU time: vLLM's kernel may run on its OpenMP thread
    dtype = torch.bfloat16
    generator = torch.Generator().manual_seed(0)
    weights = [
        [(torch.randn(o, i, generator=generator) * 0.02).to(dtype) for o, i in SHAPES]
        for _ in range(LAYERS)
    ]
    ours = [[PackedLinear([w], [None]) for w in layer] for layer in weights]
    theirs = [[ops.create_onednn_mm(w.t(), 32) for w in layer] for layer in weights]
    kernels = {
        "torch packed (HF engine)": lambda layer, k, x: ours[layer][k](x),
        "vllm onednn_mm": lambda layer, k, x: ops.onednn_mm(theirs[layer][k], x, None),
    }
    info = cpu_info()
    sha, dirty = git_state()
    stamp = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git_sha": sha,
        "git_dirty": dirty,
        "cpu": info.model,
        "isa": info.isa,
        "dtype": "bfloat16",
    }
    rows_out = []

    def add(case, rows, kernel, times):
        for stat, value in zip(("median", "q25", "q75"), spread(times), strict=True):
            rows_out.append(
                {
                    **stamp,
                    "case": case,
                    "rows": rows,
                    "kernel": kernel,
                    "stat": stat,
                    "value": round(value, 4),
                }
            )

    for rows in (1, 3, 8):
        inputs = [torch.randn(1, rows, i, generator=generator).to(dtype) for _, i in SHAPES]
        outputs = [kernel(0, 2, inputs[2]) for kernel in kernels.values()]
        if not torch.equal(outputs[0], outputs[1]):
            gap = float((outputs[0].float() - outputs[1].float()).abs().max())
            raise SystemExit(f"the two kernels disagree on a {rows}-row product (max |diff| {gap})")

        times = {name: [] for name in kernels}
        for _ in range(args.repeats):  # alternate, so drifts in machine speed hit both alike
            for name, kernel in kernels.items():
                times[name] += cpu_times_ms(lambda f=kernel, x=inputs: sweep(f, x), 1, clock)
        for name in kernels:
            add("sweep_ms", rows, name, times[name])
            print(f"{rows} rows, {name:26} {statistics.median(times[name]):7.2f} ms a sweep")

    tiny = torch.randn(64, HIDDEN, generator=generator).to(dtype)
    x = torch.randn(1, 1, HIDDEN, generator=generator).to(dtype)
    tiny_ours, tiny_theirs = PackedLinear([tiny], [None]), ops.create_onednn_mm(tiny.t(), 32)
    tiny_calls = {
        "torch packed (HF engine)": lambda: tiny_ours(x),
        "vllm onednn_mm": lambda: ops.onednn_mm(tiny_theirs, x, None),
    }
    for name, call in tiny_calls.items():
        per_call = cpu_times_ms(lambda c=call: [c() for _ in range(1000)], 15, clock)
        add("call_us", 1, name, per_call)  # 1000 calls in ms = one call in us
        print(f"one call, {name:26} {statistics.median(per_call):6.2f} us")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    earlier = []
    if args.out.exists():  # rows of a layout without a column get it empty (unknown)
        with open(args.out, newline="") as handle:
            earlier = [{k: row.get(k, "") for k in FIELDS} for row in csv.DictReader(handle)]
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(earlier + rows_out)
    print(f"appended {len(rows_out)} rows to {args.out}")


if __name__ == "__main__":
    main()
