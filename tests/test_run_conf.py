"""Every YAML under configs/ composes and validates; bad configs fail with one clear line.

Composition goes through Hydra's compose API against the real configs/ folder, with the same
schema (cactus_bench.run.conf.RunConf) and conversion run.py uses. Fast: no model (the config
hash tests build the rule, which imports torch).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers.runs import CONFIG_DIR, REPO, compose_cfg, compose_run_conf, sweep_params
from omegaconf import OmegaConf

from cactus_bench.run import (
    ConfigError,
    RunConf,
    build_identity,
    rule_params_of,
    run,
    run_conf_from_dict,
    validate,
)

GROUPS = ("model", "task", "sampler", "backend", "logger", "experiment")
ALL_YAMLS = sorted(p.relative_to(CONFIG_DIR).as_posix() for p in CONFIG_DIR.rglob("*.yaml"))


def overrides_for(relative: str) -> list[str]:
    parts = relative.removesuffix(".yaml").split("/")
    if parts == ["config"]:
        return []
    if parts[:2] == ["hydra", "launcher"]:
        return [f"hydra/launcher={parts[2]}"]
    if parts[0] == "local":  # git-ignored cluster settings, merged into the slurm launcher
        return ["hydra/launcher=slurm"]
    if parts[0] == "cell":  # a pair's cell is chosen by naming the pair and no task
        pair = parts[1].removesuffix("_default")
        return [f"model={pair}"] if (CONFIG_DIR / "model" / f"{pair}.yaml").exists() else []
    assert len(parts) == 2 and parts[0] in GROUPS, f"unexpected config file {relative}"
    return [f"{parts[0]}={parts[1]}"]


@pytest.mark.parametrize("relative", ALL_YAMLS)
def test_every_yaml_composes_and_validates(relative):
    overrides = overrides_for(relative)
    cfg = compose_cfg(overrides, hydra_node=True)
    OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    conf = compose_run_conf(overrides)
    assert isinstance(conf, RunConf)
    # A preset's sweep names only options that exist (each has its own case here), and its
    # first job composes and validates.
    params = sweep_params(cfg)
    for key, values in params.items():
        for value in values if key in GROUPS else ():
            assert (CONFIG_DIR / key / f"{value}.yaml").exists(), f"{relative}: {key}={value}"
    if params:
        compose_run_conf([*overrides, *(f"{key}={values[0]}" for key, values in params.items())])


def test_default_is_the_embedded_demo():
    conf = compose_run_conf([])
    assert (conf.model.name, conf.task.name, conf.sampler["name"]) == (
        "smollm2_135m",
        "demo",
        "cactus",
    )
    assert conf.limit is not None and conf.max_new_tokens <= 256  # minutes on a CPU, not hours
    assert (conf.temperature, conf.top_p, conf.top_k) == (0.6, 0.95, 20)
    assert compose_run_conf(["task=gsm8k"]).m == 10  # the paper's default draft length


def choice(overrides):
    rule_params = rule_params_of(compose_run_conf(overrides))
    return rule_params.rule, rule_params.values()


def test_delta_shortcut_and_preset_arms_set_one_value():
    assert choice([]) == ("cactus", {"delta": 1.0})  # configs/sampler/cactus.yaml
    assert choice(["delta=0.75"]) == ("cactus", {"delta": 0.75})
    assert choice(["sampler.delta=0.5"]) == ("cactus", {"delta": 0.5})
    assert choice(["sampler=cactus_exact_0.25"]) == (
        "cactus_exact",
        {"delta": 0.25, "divergence": "kl"},
    )
    assert choice(["sampler=cactus_0.5", "delta=2"]) == ("cactus", {"delta": 2.0})  # shortcut wins
    # TAS has no budget: delta= does not reach it (not recorded, not hashed)
    assert choice(["sampler=tas", "delta=0.5"]) == ("tas", {"threshold": 0.09, "alpha": 0.3})
    assert choice(["sampler=verifier", "delta=0.5"]) == ("verifier", {})


def test_task_defaults_yield_to_presets_and_command_line():
    assert compose_run_conf(["task=gsm8k"]).limit is None
    assert compose_run_conf(["task=gsm8k", "limit=3"]).limit == 3
    demo = compose_run_conf(["experiment=demo"])
    assert (demo.experiment_name, demo.baseline, demo.results_dir) == (
        "demo",
        "interleave",
        "results/demo",
    )


def test_demo_gsm8k_slice_extends_the_demo_sweep_into_the_same_csv():
    demo = compose_cfg(["experiment=demo"], hydra_node=True)
    gsm8k = compose_cfg(["experiment=demo_gsm8k", "task=gsm8k"], hydra_node=True)
    demo_params, gsm8k_params = sweep_params(demo), sweep_params(gsm8k)
    assert demo_params["task"] == ["demo"] and gsm8k_params["task"] == ["gsm8k"]
    assert len(demo_params["sampler"]) == 11
    # The slice keeps one arm per rule (delta = 1), a subset of the demo's arms: same pair.
    assert set(gsm8k_params["sampler"]) < set(demo_params["sampler"])
    assert {"verifier", "sps", "tas", "cactus_1.0", "cactus_exact_1.0"} == set(
        gsm8k_params["sampler"]
    )
    for key in ("experiment_name", "results_dir", "baseline", "m", "threads", "device"):
        assert gsm8k[key] == demo[key], key
    # the preset's slice size wins over the GSM8K task's own defaults (all 1,319, 4096 tokens)
    assert (gsm8k.limit, gsm8k.max_new_tokens) == (4, 96)


def test_table1_preset_covers_the_paper_grid():
    cfg = compose_cfg(["experiment=table1"], hydra_node=True)
    params = sweep_params(cfg)
    assert str(cfg.hydra.mode).endswith("MULTIRUN")
    assert set(params["model"]) == {"qwen3_8b", "qwen3_14b"}
    assert set(params["m"]) == {"10", "20"}
    assert set(params["sampler"]) == {"verifier", "sps", "tas", "cactus_0.75", "cactus_1.0"}


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["delta=-0.5"], "delta must be >= 0"),
        (["m=0"], "m must be >= 1 (got 0)"),
        (["detla=1"], "unknown config key 'detla' (did you mean 'delta'?)"),
        (["sampler.detla=1"], "unknown config key 'sampler.detla'"),
        (["model=qwen3_9b"], "unknown model 'qwen3_9b'"),
        (["task=gsm8"], "unknown task 'gsm8' (did you mean 'gsm8k'?)"),
        (["sampler=cactis"], "unknown sampler 'cactis' (did you mean 'cactus'?)"),
        (["delta=abc"], "could not be converted to Float"),
        (["baseline=sometimes"], "baseline must be one of interleave, cached, none"),
        (["engine.compile=always"], "engine.compile must be one of auto, on, off"),
        (["limit=0"], "limit must be >= 1"),
        (["top_p=0"], "top_p must be in (0, 1]"),
        (["device=gpu"], "device must be auto, cpu, mps, cuda or cuda:N"),
        (["sampler=sps", "sampler.delta=0.5"], "the chosen sampler takes no 'delta'"),
        (["sampler=sps", "+sampler.delta=0.5"], "sampler 'sps' does not take delta"),
        (["sampler=cactus", "+sampler.detla=1"], "does not take detla (did you mean 'delta'?)"),
        (["sampler=tas", "sampler.threshold=1.5"], "threshold must be in (0, 1] for tas"),
        (["sampler=topk", "sampler.k=2.5"], "k must be an integer for topk"),
        (["sampler=cactus_exact", "sampler.divergence=js"], "divergence must be one of kl"),
    ],
)
def test_validation_errors_are_one_line(overrides, expected):
    with pytest.raises(ConfigError) as caught:
        compose_run_conf(overrides)
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message


def test_run_conf_from_dict_builds_and_validate_checks_it():
    base = OmegaConf.to_container(compose_cfg([]), resolve=True)
    assert run_conf_from_dict(base).sampler["name"] == "cactus"
    with pytest.raises(ConfigError, match="m must be >= 1"):
        validate(run_conf_from_dict({**base, "m": 0}))
    with pytest.raises(ConfigError, match="sampler 'cactus' does not take foo"):
        validate(run_conf_from_dict({**base, "sampler": {**base["sampler"], "foo": 1}}))
    with pytest.raises(ConfigError, match="m must be >= 1"):
        run(run_conf_from_dict({**base, "m": 0}))  # run() checks before anything loads


def test_hash_ignores_what_does_not_change_a_measurement():
    def hashed(overrides):
        return build_identity(compose_run_conf([*overrides, "device=cpu"]))[0].config_hash

    assert hashed(["sampler=sps", "delta=0.5"]) == hashed(["sampler=sps", "delta=1.0"])
    assert hashed(["sampler=verifier", "m=10"]) == hashed(["sampler=verifier", "m=20"])
    assert hashed(["force=true", "results_dir=/elsewhere"]) == hashed([])
    assert hashed(["delta=0.5"]) != hashed(["delta=1.0"])
    assert hashed(["sampler=cactus_0.5"]) == hashed(["delta=0.5"])  # a preset is its values
    assert hashed(["m=10"]) != hashed(["m=20"])


def test_identity_records_the_resolved_dtype(monkeypatch):
    """dtype=auto reaches the CSV row, the baseline key and the hash as what it resolved to, so
    a bf16 run and an fp32 run of one config never share a baseline or a resume slot."""
    import dataclasses

    from cactus_bench.engine import cpu_kernels

    def measured(flags, dtype="auto"):
        """What the identity says while the CPU has `flags` (its fields are computed lazily)."""
        info = dataclasses.replace(
            cpu_kernels.cpu_info(), flags=frozenset(flags), onednn=True, onednn_bf16=True
        )
        monkeypatch.setattr(cpu_kernels, "cpu_info", lambda: info)
        identity = build_identity(compose_run_conf(["device=cpu", f"model.dtype={dtype}"]))[0]
        return (
            identity.columns("r")["dtype"],
            identity.config_hash,
            identity.baseline_key([[1, 2]], "cpu"),
        )

    bf16, fp32 = measured({"avx512f", "avx512_bf16"}), measured({"avx512f"})
    assert (bf16[0], fp32[0]) == ("bfloat16", "float32")
    assert bf16[1] != fp32[1]  # config hash
    assert bf16[2] != fp32[2]  # baseline key
    assert measured({"avx512f", "avx512_bf16"}, "float32")[0] == "float32"


def test_a_changed_embedded_drafter_is_a_new_run(tmp_path, monkeypatch):
    """The committed drafter's weights and logit scale are part of a speculative run's hash
    (a recalibrated drafter must not resume an older one's rows); verifier-only runs and the
    baseline key do not depend on them."""
    import json

    from cactus_bench.models import drafter as drafter_module

    weights, config = tmp_path / "d.safetensors", tmp_path / "d.json"
    weights.write_bytes(b"weights")
    config.write_text(json.dumps({"num_layers": 3, "subset_size": 8, "logit_scale": 1.0}))

    uncached = drafter_module.drafter_fingerprint.__wrapped__
    monkeypatch.setattr(drafter_module, "drafter_fingerprint", lambda: uncached(weights, config))

    def identities():  # (cactus δ=1 run, verifier-only run) of the embedded pair
        base = ["device=cpu", "model.dtype=float32"]
        spec = build_identity(compose_run_conf([*base, "sampler=cactus", "delta=1.0"]))[0]
        return spec, build_identity(compose_run_conf([*base, "sampler=verifier"]))[0]

    spec, alone = identities()
    assert "drafter_fingerprint" in spec.hash_fields
    assert "drafter_fingerprint" not in alone.hash_fields
    before = (spec.config_hash, alone.config_hash, spec.baseline_key([[1]], "cpu"))
    config.write_text(json.dumps({"num_layers": 3, "subset_size": 8, "logit_scale": 1.6}))
    spec, alone = identities()
    assert spec.config_hash != before[0]
    assert (alone.config_hash, spec.baseline_key([[1]], "cpu")) == before[1:]
    config.write_text(json.dumps({"num_layers": 3, "subset_size": 8, "logit_scale": 1.6, "x": 1}))
    assert identities()[0].config_hash == spec.config_hash  # bookkeeping fields do not count


def test_a_vllm_run_of_the_embedded_drafter_names_its_export_format():
    """vLLM loads the drafter's export (cactus_bench/vllm/export.py): a new export layout (its
    head law) is a new run there, never a resumed one; the HF engine's identity ignores it."""
    from cactus_bench.vllm.export import EXPORT_FORMAT

    base = ["device=cpu", "model.dtype=float32", "sampler=cactus", "delta=1.0"]
    hf = build_identity(compose_run_conf(base))[0]
    vllm = build_identity(compose_run_conf([*base, "backend=vllm"]))[0]
    assert vllm.drafter_fingerprint == f"{hf.drafter_fingerprint}+{EXPORT_FORMAT}"
    assert vllm.hash_fields["drafter_fingerprint"] == vllm.drafter_fingerprint


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["delta=-1"], "delta must be >= 0"),
        (["sampler=nope"], "unknown sampler 'nope'"),
        (["m=x"], "could not be converted to Integer"),
    ],
)
def test_cli_prints_one_line_and_exits_2(args, expected, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    done = subprocess.run(
        [sys.executable, str(REPO / "run.py"), *args, f"hydra.run.dir={tmp_path}/out"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert "Traceback" not in done.stdout + done.stderr
