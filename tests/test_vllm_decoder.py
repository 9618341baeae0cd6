"""The vLLM decoder and engines: engine kwargs, per-step metrics, records, model paths; fake
vLLM objects stand in for vLLM (real runs: tests/test_vllm_agreement.py, test_vllm_engine.py).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.vllm_fakes import FakeLLM as _FakeLLM
from helpers.vllm_fakes import fake_vllm as _fake_vllm
from helpers.vllm_fakes import spec_decode_metrics as _metrics

from cactus_bench.vllm import decoder as vb
from cactus_bench.vllm import engines as ve
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
