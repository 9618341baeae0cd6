"""The vLLM decoder and engines: engine kwargs, counters, records, model paths; fake vLLM
objects stand in for vLLM (real runs: tests/test_vllm_agreement.py).
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import decoder as vb
from cactus_bench.vllm import engines as ve


# ---- backend helpers -----------------------------------------------------------------------------
def test_llm_kwargs_for_both_arms():
    options = ve.VllmOptions(gpu_memory_utilization=0.4, enforce_eager=True, kv_cache_gib=0.5)
    spec = ve.llm_kwargs("V", drafter_id="D", m=7, dtype="bfloat16", seed=3, options=options)
    assert spec["speculative_config"] == {
        "method": "draft_model",
        "model": "D",
        "num_speculative_tokens": 7,
        "draft_sample_method": "probabilistic",
    }
    assert spec["disable_log_stats"] is False and spec["gpu_memory_utilization"] == 0.4
    assert spec["kv_cache_memory_bytes"] == 1 << 29
    base = ve.llm_kwargs("V", drafter_id=None, m=7, dtype="bfloat16", seed=3, options=options)
    assert "speculative_config" not in base


def _metrics(drafts, draft_tokens, accepted, per_pos):
    return [
        SimpleNamespace(name="vllm:spec_decode_num_drafts", value=drafts),
        SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=draft_tokens),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=accepted),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=per_pos),
        SimpleNamespace(name="vllm:num_requests_running", value=1),
    ]


def test_counters_rebuild_the_exact_accept_multiset():
    before = vb.spec_counters(_metrics(10, 30, 12, [6, 4, 2]))
    # this request: steps accepting 3, 2, 0, 1 -> per_pos [3, 2, 1], accepted 6
    after = vb.spec_counters(_metrics(14, 42, 18, [9, 6, 3]))
    delta = vb.counter_delta(before, after)
    drafted, accepted, exact = vb.steps_from_counters(delta, 3)
    assert sorted(accepted) == [0, 1, 2, 3] and drafted == [3, 3, 3, 3] and exact
    from cactus_bench.results import summarise

    record = vb.VllmRequestRecord(
        prompt_ids=[1],
        output_ids=[5] * 10,
        num_draft_tokens=3,
        drafted_per_step=drafted,
        accepted_per_step=accepted,
        emitted_per_step=[a + 1 for a in accepted],
        total_time_s=1.0,
    )
    row = summarise([record])
    assert row["al"] == pytest.approx(1.5) and row["accept_rate_by_pos"] == [0.75, 0.5, 0.25]
    assert record.to_dict()["step_order"] == "sorted"


def test_counters_short_drafts_and_contradictions():
    drafted, accepted, exact = vb.steps_from_counters(
        {"drafts": 2, "draft_tokens": 4, "accepted": 3, "per_pos": [2, 1, 0]}, 3
    )
    assert sum(drafted) == 4 and sum(accepted) == 3 and not exact
    assert all(a <= d for a, d in zip(accepted, drafted, strict=True))
    with pytest.raises(ValueError, match="inconsistent"):
        vb.steps_from_counters(
            {"drafts": 1, "draft_tokens": 3, "accepted": 2, "per_pos": [1, 1, 1]}, 3
        )


def test_stop_reason_and_sampling_kwargs():
    assert vb.stop_reason("length", None) == "length"
    assert vb.stop_reason("stop", None) == "eos" and vb.stop_reason("stop", 151645) == "eos"
    assert vb.stop_reason("stop", "\n\n") == "stop"
    from cactus_bench.engine import SamplingParams

    kw = vb.sampling_kwargs(SamplingParams(0.6, 0.95, 20), 64, ["Q:"], 5, [2])
    assert kw == {
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": 5,
        "top_k": 20,
        "stop": ["Q:"],
        "stop_token_ids": [2],
    }


# ---- engines -------------------------------------------------------------------------------------
def test_cpu_bind_and_model_paths():
    assert ve.cpu_bind(1, allowed=[3, 1]) == "1" and ve.cpu_bind(2, allowed=[3, 1]) == "1,3"
    with pytest.raises(ValueError, match="may use 2 cores"):
        ve.cpu_bind(3, allowed=[0, 1])
    assert ve.vllm_model_path("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    with pytest.raises(ValueError, match="cannot load embedded:tiny-random-verifier"):
        ve.vllm_model_path("embedded:tiny-random-verifier")


class _FakeLLM:
    """Enough of vllm.LLM for the runner: emits 6 tokens in 2 steps of m = 3 per request.

    Like vLLM, the counters live in one process-wide registry that every new engine resets
    (vLLM's unregister_vllm_metrics): an engine built earlier keeps counting into an orphan.
    """

    registry: dict = {}
    built: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.counts = {"value": [0, 0, 0, [0, 0, 0]]}
        _FakeLLM.registry = self.counts
        _FakeLLM.built.append(kwargs)

    def get_metrics(self):
        return _metrics(*_FakeLLM.registry["value"])

    def generate(self, prompts, params, use_tqdm=False):
        if "speculative_config" in self.kwargs:  # steps accepting 3 and 1
            d, t, a, pp = self.counts["value"]
            self.counts["value"] = [d + 2, t + 6, a + 4, [pp[0] + 2, pp[1] + 1, pp[2] + 1]]
        done = SimpleNamespace(
            token_ids=[65, 66, 67, 68, 69, 70],
            text="ABCDEF",
            finish_reason="length",
            stop_reason=None,
        )
        return [SimpleNamespace(outputs=[done])]


def _fake_vllm(monkeypatch):
    from cactus_bench.models import loading
    from cactus_bench.models.tiny import make_tiny_tokenizer

    fake = types.ModuleType("vllm")
    fake.LLM = _FakeLLM
    fake.SamplingParams = lambda **kw: kw
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: True, is_cuda=lambda: False)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(loading, "load_tokenizer", lambda *a: make_tiny_tokenizer())
    monkeypatch.setattr(va, "register", lambda: [])  # no real vLLM modules to patch
    monkeypatch.setenv(va.RULE_ENV, "")  # restored (removed) after the test
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    _FakeLLM.built = []


def test_lost_counters_raise_instead_of_an_empty_al(monkeypatch):
    _fake_vllm(monkeypatch)
    spec = _FakeLLM(speculative_config={})
    _FakeLLM()  # built later: the speculative engine's counters are unregistered
    decoder = vb.VllmDecoder(spec, None, num_draft_tokens=3, sampler_name="sps")
    with pytest.raises(RuntimeError, match="build the verifier-only engine first"):
        decoder.generate([1, 2], 6, seed=0)
