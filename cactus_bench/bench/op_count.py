"""GPU proxies measured on any machine: aten ops launched and host reads made by a piece of code.

On a GPU an eager aten op is (at least) one kernel launch, about 19 us on the lent H200 whatever
its size, so a decode step's op count times that is its floor when eager; a CUDA graph replays
the same kernels for one launch. A host read (`.item()`, `int(t)`, `bool(t)`, `.tolist()`,
`nonzero`, a data-dependent shape) waits for every queued kernel: the GPU idles until the host
has the value and launched the next op, and a step with one cannot be captured in a CUDA graph.

`count_ops(fn)` runs `fn` under a `TorchDispatchMode` (it sees every aten op the dispatcher
runs, on any device) and returns what it counted. Counting runs the code, so it proves the
count of that run: a branch that reads the host only on bad input is not seen on good input.

    with OpCounter() as counter:
        rule.verify(ids, p, q, uniforms=u)
    counter.ops, counter.host_reads, counter.reads_by_op
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that copy a device value to the host (each a GPU synchronisation): `.item()`,
# `int()/float()` and `bool()` of a tensor, `.tolist()`, and ops whose output shape depends on
# the data (their size is read before the output is allocated).
HOST_READ_OPS = frozenset(
    {
        "aten._local_scalar_dense.default",
        "aten.is_nonzero.default",
        "aten.item.default",
        "aten.nonzero.default",
        "aten.nonzero_static.default",  # static shape, but still synchronises on CUDA
        "aten.masked_select.default",
        "aten.unique_consecutive.default",
        "aten._unique2.default",
        "aten.repeat_interleave.Tensor",
        "aten.equal.default",
        "aten._assert_async.msg",
    }
)


# Conversions that reach no aten op on a CPU tensor (they read its memory directly) but copy a
# GPU tensor to the host: counted by wrapping them while a counter is active.
_CONVERSIONS = ("tolist", "numpy")


class OpCounter(TorchDispatchMode):
    """Counts aten ops (`ops`, `by_op`) and host reads (`host_reads`, `reads_by_op`).

    Each `tolist()` / `numpy()` counts as one read (one copy to the host, whatever its size),
    and so does a `_to_copy` from a non-CPU tensor to the CPU.
    """

    def __init__(self):
        super().__init__()
        self.by_op: Counter[str] = Counter()
        self.reads_by_op: Counter[str] = Counter()
        self._saved: dict[str, object] = {}

    def __enter__(self):
        for name in _CONVERSIONS:
            original = getattr(torch.Tensor, name)
            self._saved[name] = original
            setattr(torch.Tensor, name, self._counting(name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
        return super().__exit__(*exc)

    def _counting(self, name, original):
        def conversion(tensor, *args, **kwargs):
            self.reads_by_op[f"Tensor.{name}"] += 1
            return original(tensor, *args, **kwargs)

        return conversion

    @property
    def ops(self) -> int:
        return sum(self.by_op.values())

    @property
    def host_reads(self) -> int:
        return sum(self.reads_by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.by_op[name] += 1
        if name in HOST_READ_OPS or _copies_to_host(name, args, kwargs):
            self.reads_by_op[name] += 1
        return func(*args, **(kwargs or {}))


def _copies_to_host(name: str, args, kwargs) -> bool:
    """A `_to_copy` / `copy_` that moves a non-CPU tensor's values to the CPU."""
    if name == "aten._to_copy.default":
        device = (kwargs or {}).get("device")
        return device is not None and torch.device(device).type == "cpu" and _on_device(args[0])
    if name == "aten.copy_.default":
        return args[0].device.type == "cpu" and _on_device(args[1])
    return False


def _on_device(tensor) -> bool:
    return isinstance(tensor, torch.Tensor) and tensor.device.type not in ("cpu", "meta")


def count_ops(fn, *args, **kwargs) -> tuple[OpCounter, object]:
    """(counter, fn's result) for one call of fn(*args, **kwargs)."""
    with OpCounter() as counter:
        result = fn(*args, **kwargs)
    return counter, result


# Tensor methods and functions that read a value to the host (traced by torch >= 2.13 as
# unbacked values instead of breaking the graph, so a fullgraph compile alone no longer proves
# the code capturable).
_HOST_METHODS = frozenset({"item", "tolist", "nonzero", "numpy", "__bool__", "__int__"})
_HOST_FUNCTIONS = frozenset({"nonzero", "argwhere", "masked_select", "unique", "repeat_interleave"})


def compiles_fullgraph(fn, *args, **kwargs) -> tuple[bool, str]:
    """(True, "") when `torch.compile(fn, fullgraph=True, dynamic=False)` traces fn on these
    inputs into one graph with no host read and no data-dependent size: the proof that it can
    be captured in a CUDA graph. (False, the reason) otherwise: the compiler's first line, or
    the offending nodes."""
    import torch._dynamo  # lazy: the compiler stack loads only for this check
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols  # lazy: as above

    offending: list[str] = []

    def inspect(graph_module, example_inputs):
        for node in graph_module.graph.nodes:
            name = getattr(node.target, "__name__", str(node.target))
            if node.op == "call_method" and name in _HOST_METHODS:
                offending.append(f"Tensor.{name}")
            elif node.op == "call_function" and name in _HOST_FUNCTIONS:
                offending.append(name)
            elif node.op != "output" and free_unbacked_symbols(node.meta.get("example_value")):
                offending.append(f"{name} (a size read from the data)")
        return graph_module.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=False, backend=inspect)
    try:
        compiled(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the compiler's reason is the answer
        return False, f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    finally:
        torch._dynamo.reset()
    if offending:
        return False, "host reads or data-dependent shapes: " + ", ".join(sorted(set(offending)))
    return True, ""
