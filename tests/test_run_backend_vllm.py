"""backend=vllm in a run (cactus_bench.run.backends.vllm): checks, hashing, fake engines.

The fake `vllm.LLM` stands in for vLLM's engine here; the real library is exercised by the vLLM
adapter's own tests in the vLLM environment (make test-vllm).
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
import torch
from test_run_orchestrate import compose_tiny  # the run tests' tiny config, not validated
from test_vllm_adapter import _has_vllm, _metrics

from cactus_bench.run import ConfigError, build_identity, run, validate
from cactus_bench.run.backends import check_backend
from cactus_bench.vllm import acceptance as va


def _conf(tmp_path, *overrides):
    return compose_tiny(tmp_path, *overrides)


def test_backend_vllm_without_vllm_is_one_line(tmp_path):
    if _has_vllm():
        pytest.skip("vllm is installed here")
    with pytest.raises(ConfigError, match="backend=vllm needs vLLM importable") as error:
        check_backend(_conf(tmp_path, "backend=vllm"))
    assert "\n" not in str(error.value)


def test_backend_options_are_validated_and_hashed(tmp_path):
    conf = _conf(tmp_path, "backend=vllm", "backend.gpu_memory_utilization=1.5")
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        validate(conf)
    eager = _conf(tmp_path, "backend=vllm", "backend.enforce_eager=true")
    assert build_identity(eager)[0].hash_fields["backend"]["enforce_eager"] is True
    assert build_identity(_conf(tmp_path))[0].hash_fields["backend"] == "hf"  # hf: unchanged


class _FakeLLM:
    """Enough of vllm.LLM for the runner: emits 6 tokens in 2 steps of m = 3 per request."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.counts = [0, 0, 0, [0, 0, 0]]

    def get_metrics(self):
        return _metrics(*self.counts)

    def generate(self, prompts, params, use_tqdm=False):
        if "speculative_config" in self.kwargs:  # steps accepting 3 and 1
            d, t, a, pp = self.counts
            self.counts = [d + 2, t + 6, a + 4, [pp[0] + 2, pp[1] + 1, pp[2] + 1]]
        done = SimpleNamespace(
            token_ids=[65, 66, 67, 68, 69, 70],
            text="ABCDEF",
            finish_reason="length",
            stop_reason=None,
        )
        return [SimpleNamespace(outputs=[done])]


def test_run_drives_fake_vllm_engines(tmp_path, monkeypatch):
    fake = types.ModuleType("vllm")
    fake.LLM = _FakeLLM
    fake.SamplingParams = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(va, "register", lambda: [])  # no real vLLM modules to patch
    monkeypatch.setenv(va.RULE_ENV, "")  # restored (removed) after the test
    outcome = run(_conf(tmp_path, "backend=vllm", "sampler=cactus", "delta=0.5"))
    row = outcome.row
    assert row["al"] == pytest.approx(2.0) and row["tokens_per_step"] == pytest.approx(3.0)
    assert row["accept_rate_by_pos"] == [1.0, 0.5, 0.5]
    assert row["draft_time_s"] is None and row["verify_time_s"] is None
    assert row["tokens_per_s_baseline"] is not None and row["backend"] == "vllm"
    assert va.rule_from_env().params() == {"delta": 0.5}  # exported for vLLM's workers
