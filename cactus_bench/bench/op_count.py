"""GPU proxies measured on any machine: aten ops launched and stalls made by a piece of code.

On a GPU an eager aten op is (at least) one kernel launch, about 19 us on the lent H200 whatever
its size, so a decode step's op count times that is its floor when eager; a CUDA graph replays
the same kernels for one launch. A host read (`.item()`, `int(t)`, `bool(t)`, `.tolist()`,
`nonzero`, a data-dependent shape) waits for every queued kernel: the GPU idles until the host
has the value and launched the next op, and a step with one cannot be captured in a CUDA graph.
A host write (a tensor built from Python data: `torch.tensor(list)`, `t[i] = 3`, a copy from a
CPU tensor into a device tensor) is a blocking copy from pageable memory on CUDA, and a
`synchronize` call waits for the whole queue: each is a stall too. `stalls` sums the three kinds;
a decode step should make one (its result's read).

`count_ops(fn)` runs `fn` under a `TorchDispatchMode` (it sees every aten op the dispatcher
runs, on any device) and returns what it counted. Counting runs the code, so it proves the
count of that run: a branch that reads the host only on bad input is not seen on good input.

    with OpCounter() as counter:
        rule.verify(ids, p, q, uniforms=u)
    counter.ops, counter.host_reads, counter.reads_by_op
    counter.host_writes, counter.syncs, counter.stalls, counter.stalls_by_kind
"""

from __future__ import annotations

import weakref
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


# aten ops that build a tensor from host (Python) data: on CUDA the data is then copied to the
# device from pageable memory, a blocking copy. `torch.tensor(list)`, `torch.as_tensor(list)`
# and `t[i] = 3` (a 0-dim tensor, then copied) all reach `lift_fresh`.
HOST_WRITE_OPS = frozenset({"aten.lift_fresh.default", "aten.lift_fresh_copy.default"})
# Calls that wait for the device's queue: counted (and skipped where CUDA is absent) while a
# counter is active, so a CPU run sees the synchronisations a CUDA run would make.
_SYNCS = (
    (torch.cuda, "synchronize"),
    (torch.cuda.Event, "synchronize"),
    (torch.cuda.Stream, "synchronize"),
)

# Conversions that reach no aten op on a CPU tensor (they read its memory directly) but copy a
# GPU tensor to the host: counted by wrapping them while a counter is active.
_CONVERSIONS = ("tolist", "numpy")


class OpCounter(TorchDispatchMode):
    """Counts aten ops (`ops`, `by_op`) and the stalls: host reads (`host_reads`,
    `reads_by_op`), host writes (`host_writes`, `writes_by_op`) and synchronisations (`syncs`,
    `syncs_by_call`).

    Each `tolist()` / `numpy()` counts as one read (one copy to the host, whatever its size),
    and so does a `_to_copy` from a non-CPU tensor to the CPU. Each tensor built from host data
    counts as one write, and so does a copy from a CPU tensor into a device tensor (not again
    for a tensor already counted when it was built).
    """

    def __init__(self):
        super().__init__()
        self.by_op: Counter[str] = Counter()
        self.reads_by_op: Counter[str] = Counter()
        self.writes_by_op: Counter[str] = Counter()
        self.syncs_by_call: Counter[str] = Counter()
        self._saved: list[tuple[object, str, object]] = []
        self._lifted: weakref.WeakSet = weakref.WeakSet()  # host-built tensors, counted once
        self.forward_ops = 0  # ops run inside `forwards()` sections (a model's forward)
        self.forward_calls = 0
        self._forward_depth = 0

    def __enter__(self):
        for name in _CONVERSIONS:
            self._wrap(torch.Tensor, name, self._counting(name, getattr(torch.Tensor, name)))
        for owner, name in _SYNCS:
            self._wrap(owner, name, self._sync(owner, name, getattr(owner, name)))
        return super().__enter__()

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()
        return super().__exit__(*exc)

    def _wrap(self, owner, name: str, replacement) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def _counting(self, name, original):
        def conversion(tensor, *args, **kwargs):
            self.reads_by_op[f"Tensor.{name}"] += 1
            return original(tensor, *args, **kwargs)

        return conversion

    def _sync(self, owner, name: str, original):
        label = f"{getattr(owner, '__name__', 'torch.cuda')}.{name}"
        label = "torch.cuda.synchronize" if owner is torch.cuda else label

        def synchronise(*args, **kwargs):
            self.syncs_by_call[label] += 1
            if torch.cuda.is_available():
                return original(*args, **kwargs)
            return None

        return synchronise

    def forwards(self, fn):
        """fn wrapped so that the ops it runs count as a forward's (`forward_ops`): what a
        captured forward replays, apart from the eager work between forwards."""

        def inside(*args, **kwargs):
            self.forward_calls += 1
            self._forward_depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self._forward_depth -= 1

        return inside

    @property
    def ops_outside_forwards(self) -> int:
        return self.ops - self.forward_ops

    @property
    def host_writes(self) -> int:
        return sum(self.writes_by_op.values())

    @property
    def syncs(self) -> int:
        return sum(self.syncs_by_call.values())

    @property
    def stalls(self) -> int:
        """Every point where the device's queue waits for the host or the host for it."""
        return self.host_reads + self.host_writes + self.syncs

    @property
    def stalls_by_kind(self) -> Counter[str]:
        return self.reads_by_op + self.writes_by_op + self.syncs_by_call

    @property
    def ops(self) -> int:
        return sum(self.by_op.values())

    @property
    def host_reads(self) -> int:
        return sum(self.reads_by_op.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.by_op[name] += 1
        self.forward_ops += self._forward_depth > 0
        if name in HOST_READ_OPS or _copies_to_host(name, args, kwargs):
            self.reads_by_op[name] += 1
        source = _copied_from_host(name, args, kwargs)
        if source is not None and source not in self._lifted:
            self.writes_by_op[name] += 1
        result = func(*args, **(kwargs or {}))
        if name in HOST_WRITE_OPS:
            self.writes_by_op[name] += 1
            if isinstance(result, torch.Tensor):
                self._lifted.add(result)
        return result


def _copies_to_host(name: str, args, kwargs) -> bool:
    """A `_to_copy` / `copy_` that moves a non-CPU tensor's values to the CPU."""
    if name == "aten._to_copy.default":
        device = (kwargs or {}).get("device")
        return device is not None and torch.device(device).type == "cpu" and _on_device(args[0])
    if name == "aten.copy_.default":
        return args[0].device.type == "cpu" and _on_device(args[1])
    return False


def _copied_from_host(name: str, args, kwargs):
    """The CPU tensor a `_to_copy` / `copy_` moves onto a device, else None."""
    if name == "aten._to_copy.default":
        device = (kwargs or {}).get("device")
        moves = device is not None and torch.device(device).type not in ("cpu", "meta")
        return args[0] if moves and args[0].device.type == "cpu" else None
    if name == "aten.copy_.default":
        return args[1] if _on_device(args[0]) and args[1].device.type == "cpu" else None
    return None


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
