"""The vLLM V2 drafter law and bridge under a real CUDA-graph capture, without vLLM (a lent GPU).

    PYTHONPATH=. python3 scripts/gpu_probe_vllm_v2.py   # prints RESULT {json}

Captures `v2_law.processed_law_logits` and `bridge_v2` (SpS, Cactus) at V = 151,936 in
torch.cuda.CUDAGraph (a host read during capture raises), replays them, and compares with the
eager call and with the CPU. Recorded: results/bench/vllm_v2_graph_probe.json.
"""

import json
import sys
import time

out = {"python": sys.version.split()[0]}
try:
    import torch
except Exception as error:  # noqa: BLE001
    print("RESULT", json.dumps({**out, "torch": f"missing: {error}"}))
    sys.exit(0)
out["torch"] = torch.__version__
out["cuda"] = torch.cuda.is_available()
dev = "cuda" if torch.cuda.is_available() else "cpu"
out["device"] = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
from cactus_bench.samplers import make_sampler  # noqa: E402
from cactus_bench.vllm import bridge_v2  # noqa: E402
from cactus_bench.vllm.v2_law import processed_law_logits  # noqa: E402

V = 151936 if dev == "cuda" else 4096


def graphed(fn, *args):
    """fn(*args) captured in a CUDA graph (raises on any host sync during capture)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn(*args)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        result = fn(*args)
    return g, result


def timed(fn, n=20):
    if dev == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    return round(1e3 * (time.perf_counter() - t) / n, 3)


gen = torch.Generator(device=dev).manual_seed(0)
R = 8
logits = torch.randn(R, V, device=dev, generator=gen).to(torch.bfloat16) * 3
states = torch.tensor([0, 1, 2, 3, -1, 5, 6, 7], device=dev)
temp = torch.tensor([0.7, 1.0, 0.0, 1.3, 1, 1, 0.6, 0.9], device=dev)
top_k = torch.tensor([20, V, 5, V, V, 50, V, 1], dtype=torch.int32, device=dev)
top_p = torch.tensor([0.95, 0.8, 1, 1, 1, 0.9, 1, 1], device=dev)
law_args = (logits, states, temp, top_k, top_p)
eager = processed_law_logits(*law_args)
cpu = processed_law_logits(*(a.cpu() for a in law_args))
out["law_kept_per_row"] = torch.isfinite(eager.float()).sum(-1).tolist()
out["law_cpu_equal"] = bool(torch.equal(eager.cpu(), cpu))
if dev == "cuda":
    g, graph_out = graphed(processed_law_logits, *law_args)
    logits.copy_(torch.randn(R, V, device=dev, generator=gen).to(torch.bfloat16) * 3)
    g.replay()
    torch.cuda.synchronize()
    out["law_graph_replay_equal"] = bool(torch.equal(graph_out, processed_law_logits(*law_args)))
    out["law_ms_graph"] = timed(g.replay)
out["law_ms_eager"] = timed(lambda: processed_law_logits(*law_args))

# the bridge: B requests, K drafts each, 0.34's layout
B, K = 4, 3
L = B * (K + 1)
draft_values = torch.randn(B, K, V, device=dev, generator=gen) * 2
target = torch.randn(L, V, device=dev, generator=gen) * 2
cache = type("Cache", (), {})()
cache.values, cache.row_mapping = (
    draft_values,
    torch.tensor([2, 0, 3, 1], device=dev, dtype=torch.int32),
)
drafts = torch.randint(0, V, (B, K), device=dev, generator=gen)
draft_sampled = torch.cat([torch.zeros(B, 1, device=dev, dtype=torch.long), drafts], 1).view(-1)
cu = torch.arange(0, L + 1, K + 1, device=dev, dtype=torch.int32)
pos = torch.arange(L, device=dev)
idx = torch.arange(B, device=dev, dtype=torch.int32)
temperature = torch.tensor([1.0, 0.7, 0.0, 1.0], device=dev)
seed = torch.tensor([1, 2, 3, 4], device=dev)
args = (target, cache, draft_sampled, cu, pos, idx, None, None, temperature, seed, K)
for name, params in (("sps", {}), ("cactus", {"delta": 0.5})):
    rule = make_sampler(name, **params)

    def call(rule=rule):
        return bridge_v2.rejection_sample_v2(*args, rule=rule, skip_masked_vocab_blocks=True)

    sampled, num = call()
    cpu_args = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
    cpu_cache = type("Cache", (), {})()
    cpu_cache.values, cpu_cache.row_mapping = draft_values.cpu(), cache.row_mapping.cpu()
    cpu_args = (cpu_args[0], cpu_cache, *cpu_args[2:])
    cpu_sampled, cpu_num = bridge_v2.rejection_sample_v2(*cpu_args, rule=rule)
    out[f"bridge_{name}_num_sampled"] = num.tolist()
    out[f"bridge_{name}_cpu_equal"] = bool(torch.equal(sampled.cpu(), cpu_sampled))
    if dev == "cuda":
        g, (g_sampled, g_num) = graphed(call)
        g.replay()
        torch.cuda.synchronize()
        out[f"bridge_{name}_graph_equal"] = bool(torch.equal(g_sampled, sampled))
        out[f"bridge_{name}_ms_graph"] = timed(g.replay)
    out[f"bridge_{name}_ms_eager"] = timed(call)
print("RESULT", json.dumps(out))
