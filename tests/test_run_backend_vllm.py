"""backend=vllm in a run (cactus_bench.run.backends.vllm): checks, hashing, engine order, rows.

Fake `vllm` modules stand in for vLLM here (tests/helpers/vllm_fakes.py's FakeLLM); the real
library runs in tests/test_vllm_agreement.py (make test-vllm).
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from helpers.runs import compose_tiny  # the run tests' tiny config, not validated
from helpers.vllm_fakes import FakeLLM, fake_vllm

from cactus_bench.run import ConfigError, build_identity, run, validate
from cactus_bench.run.backends import check_backend
from cactus_bench.run_settings import ACCEPTANCE_MODES
from cactus_bench.samplers.catalogue import parse_sampler
from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import engines as ve


def test_backend_vllm_without_vllm_is_one_line(tmp_path):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ConfigError, match=r"make setup-vllm") as error:
        check_backend(compose_tiny(tmp_path, "backend=vllm"))
    assert "\n" not in str(error.value)


def test_backend_vllm_refuses_in_memory_models(tmp_path, monkeypatch):
    fake_vllm(monkeypatch)
    with pytest.raises(ConfigError, match="cannot load embedded:tiny-random"):
        check_backend(compose_tiny(tmp_path, "backend=vllm"))


@pytest.mark.parametrize("rule", ["chow", "tokenv3", "fsd", "bild"])
def test_backend_vllm_refuses_a_test_on_the_unscaled_laws_at_config_time(tmp_path, rule):
    """The bridge hands rules p and q only: a rule reading the temperature-1 laws is refused by
    validate (no vLLM needed), and runs with test_law=processed."""
    with pytest.raises(ConfigError, match="set sampler.test_law=processed") as error:
        validate(compose_tiny(tmp_path, "backend=vllm", f"sampler={rule}"))
    assert "\n" not in str(error.value)
    validate(
        compose_tiny(tmp_path, "backend=vllm", f"sampler={rule}", "sampler.test_law=processed")
    )
    validate(compose_tiny(tmp_path, f"sampler={rule}"))  # the HF engine passes both laws


def test_backend_options_are_validated_and_hashed(tmp_path):
    conf = compose_tiny(tmp_path, "backend=vllm", "backend.gpu_memory_utilization=1.5")
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        validate(conf)
    with pytest.raises(ConfigError, match="kv_cache_gib must be > 0"):
        validate(compose_tiny(tmp_path, "backend=vllm", "backend.kv_cache_gib=0"))
    eager = compose_tiny(tmp_path, "backend=vllm", "backend.enforce_eager=true")
    assert build_identity(eager)[0].hash_fields["backend"]["enforce_eager"] is True
    assert build_identity(compose_tiny(tmp_path))[0].hash_fields["backend"] == "hf"  # hf: unchanged


@pytest.mark.parametrize("baseline", ["interleave", "cached"])
def test_run_drives_fake_vllm_engines(tmp_path, monkeypatch, baseline):
    fake_vllm(monkeypatch)
    # fake hub ids: offline, the pre-load checkpoint check and the engine sizing look nothing up
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    conf = compose_tiny(
        tmp_path,
        "backend=vllm",
        "sampler=cactus",
        "delta=0.5",
        f"baseline={baseline}",
        "model.verifier=fake/verifier",
        "model.drafter=fake/drafter",
    )
    row = run(conf).row
    assert row["al"] == pytest.approx(2.0) and row["tokens_per_step"] == pytest.approx(3.0)
    assert row["accept_rate_by_pos"] == [1.0, 0.5, 0.5]
    assert row["draft_time_s"] is None and row["verify_time_s"] is None
    assert row["tokens_per_s_baseline"] is not None and row["backend"] == "vllm"
    assert va.rule_from_env().params() == {"delta": 0.5}  # exported for vLLM's workers
    spec = ["speculative_config" in kwargs for kwargs in FakeLLM.built]
    assert sorted(spec) == [False, True]  # one engine per arm (any order: per-request metrics)
    assert FakeLLM.built[0]["kv_cache_memory_bytes"] == ve.GIB  # CPU default
    assert FakeLLM.built[0]["model"] == "fake/verifier"


def test_a_runs_guard_reaches_the_vllm_workers(tmp_path, monkeypatch):
    """The run hands vLLM its typed parameters, guards included: near_top (the guard the bridge
    runs) is in RULE_ENV's JSON and on the rule the workers build from it."""
    fake_vllm(monkeypatch)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides = ("sampler=cactus", "delta=0.5", "near_top=0.2", "baseline=cached")
    fake = ("model.verifier=fake/verifier", "model.drafter=fake/drafter")
    run(compose_tiny(tmp_path, "backend=vllm", *overrides, *fake))
    sent = parse_sampler({"name": "cactus", "delta": 0.5, "near_top": 0.2})
    assert va.rule_params_from_env() == sent and os.environ[va.RULE_ENV] == sent.to_json()
    assert va.rule_from_env().guards.near_top == 0.2


# ---- acceptance=vllm: vLLM's own speculative sampling -------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        (["sampler=sps", "acceptance=vllm"], "add backend=vllm"),
        (["backend=vllm", "sampler=cactus", "acceptance=vllm"], "set sampler=sps"),
        (["backend=vllm", "sampler=verifier", "acceptance=vllm_greedy"], "set sampler=sps"),
        (["backend=vllm", "sampler=sps", "acceptance=vllms"], "one of rule, vllm, vllm_greedy"),
    ],
    ids=["on-hf", "another-rule", "verifier-alone", "unknown"],
)
def test_vllms_own_sampler_refuses_bad_combinations_in_one_line(tmp_path, overrides, fix):
    with pytest.raises(ConfigError, match=fix) as error:
        validate(compose_tiny(tmp_path, *overrides))
    assert "\n" not in str(error.value)


def test_vllms_own_sampler_is_its_own_run(tmp_path):
    """acceptance enters the hash and the row only off its default, so rule rows (and rows
    written before the setting existed) keep their hashes; the two vLLM paths never share one."""

    def identity(*overrides):
        return build_identity(compose_tiny(tmp_path, "backend=vllm", "sampler=sps", *overrides))[0]

    rule, default = identity("acceptance=rule"), identity()
    own, greedy = identity("acceptance=vllm"), identity("acceptance=vllm_greedy")
    assert rule.config_hash == default.config_hash and "acceptance" not in rule.hash_fields
    assert len({rule.config_hash, own.config_hash, greedy.config_hash}) == 3
    assert own.hash_fields["acceptance"] == "vllm" == own.columns("r")["acceptance"]
    assert rule.columns("r")["acceptance"] == "rule"
    assert own.description.endswith("m=3 acceptance=vllm") and "acceptance" not in rule.description


def test_vllms_own_sampler_reaches_vllm_without_a_rule(tmp_path, monkeypatch):
    fake_vllm(monkeypatch)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    earlier = parse_sampler({"name": "cactus", "delta": 1.0}).to_json()  # an earlier run's
    monkeypatch.setenv(va.RULE_ENV, earlier)
    monkeypatch.setenv(va.EXPAND_FIX_ENV, "")  # off, and removed again after the test
    conf = compose_tiny(
        tmp_path,
        "backend=vllm",
        "sampler=sps",
        "acceptance=vllm_greedy",
        "model.verifier=fake/verifier",
        "model.drafter=fake/drafter",
    )
    row = run(conf).row
    assert row["acceptance"] == "vllm_greedy" and row["sampler"] == "sps"
    assert row["al"] == pytest.approx(2.0)  # vLLM's own per-request counts, read as before
    assert va.rule_from_env() is None and os.environ[va.EXPAND_FIX_ENV] == "1"
    (spec,) = [kwargs for kwargs in FakeLLM.built if "speculative_config" in kwargs]
    assert spec["speculative_config"]["draft_sample_method"] == "greedy"  # vLLM's default


def test_build_llm_refuses_a_rule_on_vllms_own_path():
    with pytest.raises(ValueError, match="pass rule=None"):
        ve.build_llm(
            "V", rule=parse_sampler({"name": "sps"}), acceptance="vllm", drafter_id="D", m=2
        )
    with pytest.raises(ValueError, match="acceptance must be one of"):
        ve.build_llm("V", acceptance="own", drafter_id="D", m=2)
    assert set(ve.DRAFT_SAMPLE_METHODS) == set(ACCEPTANCE_MODES)
