"""CPU kernel choices for the fast forward: what `dtype=auto` means on this CPU, and linear layers
on oneDNN with weights packed once.

Why (scripts/bench_forward.py section `linear`, results/bench/forward.csv): a batch-1 decode
step streams every weight once, and a verify over m + 1 tokens should stream them once too.
ATen's `F.linear` does not always do that: with fp32 weights it calls MKL, whose path for a few
rows depends on the CPU (on an AMD EPYC, 2-3 rows ran as separate matrix-vector products, 2-3x
the one-row time; on an Intel Xeon, 4-8 rows ran ~2x); with bf16 weights it calls oneDNN on the
plain (transposed) weight layout, which is slower than packed weights at every row count.
`PackedLinear` reorders each weight once into oneDNN's blocked layout (packed for a batch of
`PACK_BATCH_HINT` rows: packed for one row, fp32 weights stay plain and take a matrix-vector
kernel) and calls oneDNN's brgemm kernel, which covers 1-8 rows with one pass over the weights.
oneDNN picks its kernel by instruction set (cpuid: avx2, avx512_core, avx512_core_bf16,
avx512_core_amx), not by vendor, so the same path runs on Intel and AMD CPUs.

Which rows go to the packs: bf16, all (ATen's bf16 `F.linear` is oneDNN too, on the plain
weights: slower at every row count). fp32 depends on the CPU's BLAS, so it is measured, once per
model (`time_rows` over the real MLP weights, ~1 s): each row count 1..8 takes the packs only if
they cost at most 90% of ATen's time (a margin, so that noise rarely flips a choice between runs);
more rows (a prefill) take ATen's GEMM, which was faster here. Measured here (Intel): ATen for
1-3 rows, packs for 4-8; on an AMD EPYC, MKL was measured 2-3x slower at 2-3 rows, which would
give packs from 2.

bf16 (`native_bf16`): chosen by capability, not vendor. The CPU must compute bf16 dot products
in hardware (the `avx512_bf16` or `amx_bf16` flag) and torch must have oneDNN; without them
oneDNN emulates bf16 with fp32 instructions, which saves memory traffic but not time.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

LINEAR_KERNELS = ("auto", "aten", "onednn")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of hardware bf16 dot products
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")
PACK_BATCH_HINT = 8  # rows the packed layout is tuned for; any row count runs on it
PROBE_ROWS = range(1, 9)  # fp32 row counts whose kernel is measured per model (`time_rows`)
PACKED_MARGIN = 0.9  # the packs win a row count only if they take <= 90% of ATen's time
PROBE_MIN_BYTES = 64 << 20  # smaller MLP weights stay in caches: not measured, ATen for 1..8 rows


@dataclass(frozen=True)
class CpuInfo:
    """What the kernels depend on: the CPU model, its instruction-set flags, torch's build."""

    model: str  # e.g. "Intel(R) Xeon(R) Processor (family 6 model 207)"
    flags: frozenset[str]  # /proc/cpuinfo flags (empty where there is no /proc/cpuinfo)
    capability: str  # torch.backends.cpu.get_cpu_capability(): ATen's kernel level, e.g. AVX512
    onednn: bool  # torch was built with oneDNN (mkldnn) and can use it
    # torch's own probe: oneDNN can run bf16 products at all here (it needs AVX512-BW/VL/DQ or
    # AVX-NE-CONVERT; an AVX2-only CPU says no, and packing bf16 weights then raises)
    onednn_bf16: bool = False

    @property
    def x86(self) -> bool:
        return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")

    @property
    def native_bf16(self) -> bool:
        """bf16 matrix products in hardware, reachable through torch's oneDNN."""
        return (
            self.x86
            and self.onednn
            and any(flag in self.flags for flag in BF16_FLAGS)
            and self.onednn_bf16
        )

    @property
    def isa(self) -> str:
        """ATen's capability and the relevant flags, e.g. 'AVX512 (avx2 avx512f avx512_bf16)'."""
        present = [flag for flag in ISA_FLAGS if flag in self.flags]
        return f"{self.capability} ({' '.join(present) or 'flags unknown'})"


@functools.cache
def cpu_info() -> CpuInfo:
    model, flags = platform.processor() or platform.machine(), frozenset()
    with contextlib.suppress(OSError):
        text = Path("/proc/cpuinfo").read_text()
        fields = dict(re.findall(r"^(model name|cpu family|model)\s*:\s*(.+)$", text, re.M))
        if "model name" in fields:  # family and model tell CPUs apart behind a generic name
            model = f"{fields['model name'].strip()} (family {fields.get('cpu family', '?')} "
            model += f"model {fields.get('model', '?').strip()})"
        if found := re.search(r"^flags\s*:\s*(.+)$", text, re.MULTILINE):
            flags = frozenset(found.group(1).split())
    onednn = torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    onednn_bf16 = onednn and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return CpuInfo(model, flags, torch.backends.cpu.get_cpu_capability(), onednn, onednn_bf16)


def auto_cpu_dtype() -> torch.dtype:
    """`dtype=auto` for the embedded pair on CPU: bfloat16 where `native_bf16`, else float32."""
    return torch.bfloat16 if cpu_info().native_bf16 else torch.float32


def choose_packed_rows(aten_s: dict[int, float], packed_s: dict[int, float]) -> frozenset[int]:
    """The row counts whose packed products took at most PACKED_MARGIN of ATen's time."""
    return frozenset(n for n in aten_s if packed_s[n] <= PACKED_MARGIN * aten_s[n])


def time_rows(products: list[tuple], rows=PROBE_ROWS, repeats: int = 3):
    """Median CPU seconds of one sweep over `products`, per row count, for ATen and for the packs.

    products: (plain modules, their PackedLinear) pairs, e.g. each layer's gate and up
    projections and their fused pack; together larger than the CPU's caches, so the sweep
    streams the weights from memory, as a decode step does. Interleaved, warmed up once."""
    in_features = products[0][0][0].in_features
    dtype = products[0][0][0].weight.dtype
    times: dict[tuple[str, int], list[float]] = {}
    with torch.inference_mode():
        for repeat in range(repeats + 1):
            for n in rows:
                x = torch.zeros(1, n, in_features, dtype=dtype)
                for kernel in ("aten", "packed"):
                    start = time.thread_time()
                    for modules, packed in products:
                        if kernel == "packed":
                            packed(x)
                        else:
                            for module in modules:
                                module(x)
                    if repeat:
                        times.setdefault((kernel, n), []).append(time.thread_time() - start)
    median = {key: statistics.median(values) for key, values in times.items()}
    return {n: median["aten", n] for n in rows}, {n: median["packed", n] for n in rows}


def resolve_linear_kernel(kernel: str, device: torch.device, dtype: torch.dtype) -> str:
    """ "auto" -> "onednn" for fp32/bf16 weights on an x86 CPU with oneDNN, else "aten" (HF's
    modules: F.linear). "onednn" where it cannot run fails with a one-line reason."""
    if kernel not in LINEAR_KERNELS:
        raise ValueError(f"linear kernel must be one of {LINEAR_KERNELS}; got {kernel!r}")
    info = cpu_info()
    reason = None
    if device.type != "cpu":
        reason = f"the model is on {device.type}, oneDNN packing is for CPU weights"
    elif not (info.x86 and info.onednn):
        reason = f"torch has no usable oneDNN on this {platform.machine()} CPU"
    elif dtype not in (torch.float32, torch.bfloat16):
        reason = f"oneDNN packing is used for float32 and bfloat16 weights, not {dtype}"
    elif dtype == torch.bfloat16 and not info.onednn_bf16:
        reason = "oneDNN cannot pack bfloat16 weights on this CPU (no AVX512-BW/VL/DQ)"
    if kernel == "onednn" and reason is not None:
        raise ValueError(f"linear kernel 'onednn' cannot run: {reason}; use 'auto' or 'aten'")
    if kernel == "auto":
        return "aten" if reason is not None else "onednn"
    return kernel


class PackedLinear:
    """y = x W^T + b with W [out, in] reordered once into oneDNN's blocked layout.

    Several weights may be fused along `out` (e.g. q, k and v): one kernel call instead of three.
    The packed copy is made at construction; later in-place edits of the source weights are not
    seen (`FastRunner` re-packs when a weight's version changes)."""

    def __init__(self, weights: list[torch.Tensor], biases: list[torch.Tensor | None]):
        with torch.no_grad():
            weight = torch.cat([w.detach() for w in weights]) if len(weights) > 1 else weights[0]
            self.weight = torch.ops.mkldnn._reorder_linear_weight(
                weight.detach().contiguous(), PACK_BATCH_HINT
            )  # opaque oneDNN tensor [out, in]
            self.bias = None
            if any(bias is not None for bias in biases):
                parts = [
                    b.detach() if b is not None else w.new_zeros(w.shape[0])
                    for w, b in zip(weights, biases, strict=True)
                ]
                self.bias = torch.cat(parts)  # [out]
        self.sizes = [w.shape[0] for w in weights]

    @classmethod
    def of(cls, *modules: torch.nn.Linear) -> PackedLinear:
        return cls([m.weight for m in modules], [m.bias for m in modules])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """[..., in] -> [..., out]; fused weights' outputs side by side (`sizes` each)."""
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")


@functools.cache
def kernel_label(kernel: str, dtype: torch.dtype, rows: int, in_features: int = 576) -> str:
    """What runs a linear layer of `kernel` ("onednn" or "aten") for `rows` rows, e.g.
    'onednn packed: brg_matmul:avx512_core_bf16' or 'aten: BLAS (MKL)', read from oneDNN's
    verbose log (a call that logs no oneDNN primitive ran on ATen's BLAS)."""
    weight = torch.zeros(64, in_features, dtype=dtype)
    x = torch.zeros(1, rows, in_features, dtype=dtype)
    if kernel == "onednn":
        packed = PackedLinear([weight], [None])
        found = _onednn_log(lambda: packed(x))
        return f"onednn packed: {found or 'unknown'}"
    found = _onednn_log(lambda: F.linear(x, weight))
    if found:
        return f"aten: oneDNN {found} (plain weights)"
    return "aten: BLAS (MKL)" if torch.backends.mkl.is_available() else "aten: BLAS"


def _onednn_log(call) -> str | None:
    """The oneDNN implementation `call()` ran (e.g. 'brg_matmul:avx512_core_bf16'), or None."""
    with tempfile.TemporaryFile(mode="w+") as log:
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(log.fileno(), 1)  # oneDNN writes its verbose lines to the C stdout
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                call()
            ctypes.CDLL(None).fflush(None)  # C stdio buffers them: flush into the log
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        log.seek(0)
        found = re.findall(r"onednn_verbose,.*?,exec,cpu,\w+,([\w:]+),", log.read())
    return found[-1] if found else None
