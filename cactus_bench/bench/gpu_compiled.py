"""Compiled timings that cannot time an empty function.

`torch.compile` keeps only what a function returns or mutates: a function that returns None
compiles to a graph with no ops, and timing it times nothing (a rule's "compiled verify" once
came out at 0.04 ms, flat from 3 MB to 1.6 GB of laws, for exactly that reason). So every
compiled call here goes through inductor behind a backend that first drops the dead ops, as
inductor would, and counts the ops left; a compile whose graphs keep no op is refused
(`EmptyGraph`) instead of timed.
"""

from __future__ import annotations

import time

import torch

# Node kinds that compute (placeholders, attribute reads and the output node do not).
COMPUTING = ("call_function", "call_method", "call_module")


class EmptyGraph(RuntimeError):
    """The compiled function keeps no op: it returns (and mutates) nothing the compiler keeps."""


def live_ops(graph_module: torch.fx.GraphModule) -> int:
    """Ops of the graph that reach its outputs or mutate something, after dead-code elimination
    (done in place: inductor would drop the same nodes)."""
    graph_module.graph.eliminate_dead_code()
    graph_module.recompile()
    return sum(1 for node in graph_module.graph.nodes if node.op in COMPUTING)


def compile_counted(call):
    """(compiled call, per-graph live op counts, filled as dynamo hands graphs over): `call`
    under `torch.compile(fullgraph=True, dynamic=False)`, lowered by inductor."""
    from torch._inductor.compile_fx import compile_fx  # lazy: inductor is slow to import

    graphs: list[int] = []

    def counting_inductor(graph_module, example_inputs):
        graphs.append(live_ops(graph_module))
        return compile_fx(graph_module, example_inputs)

    compiled = torch.compile(call, backend=counting_inductor, fullgraph=True, dynamic=False)
    return compiled, graphs


def compile_checked(call):
    """(compiled call, live ops, compile seconds) after its first call (which compiles, under
    inference mode as the engine runs); raises EmptyGraph when its graphs keep no op."""
    compiled, graphs = compile_counted(call)
    began = time.perf_counter()
    with torch.inference_mode():
        compiled()
    compile_s = time.perf_counter() - began
    if sum(graphs) == 0:
        raise EmptyGraph(
            f"the compiled graph has no ops ({len(graphs)} graph(s)): the function must return "
            "its outputs, or the compiler removes every op and the timing measures nothing"
        )
    return compiled, sum(graphs), compile_s
