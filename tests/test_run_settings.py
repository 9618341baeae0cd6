"""The run settings table (cactus_bench.run_settings) and everything derived from it agree: the
config hash, the row's identity columns, the baseline-cache key, the schema's configuration
columns and the report's grouping keys; and a new setting reaches all of them from one line."""

from __future__ import annotations

import dataclasses

import pytest
from helpers.runs import compose_run_conf

from cactus_bench import run_settings
from cactus_bench.report.load import CONFIG_KEYS
from cactus_bench.run import build_identity
from cactus_bench.run_settings import RUN_SETTINGS, UNSET, Setting
from cactus_bench.samplers.catalogue import PARAM_COLUMNS
from cactus_bench.store import COLUMNS, CONFIG_COLUMNS, baseline_key

CONFIGS = (
    ["sampler=cactus", "delta=0.5"],
    ["sampler=sps", "repeats=2", "model.dtype=auto"],
    ["sampler=verifier", "baseline=none"],
    ["sampler=tas", "backend=vllm", "baseline=cached"],
)


def identity_of(*overrides: str):
    return build_identity(compose_run_conf(["device=cpu", *overrides]))[0]


def test_names_and_columns_are_unique_and_in_the_schema():
    hashed = [s.name for s in RUN_SETTINGS if s.hashed]
    columns = [s.csv_column for s in RUN_SETTINGS if s.csv_column is not None]
    assert len(hashed) == len(set(hashed))
    assert len(columns) == len(set(columns))
    assert set(columns) <= set(COLUMNS), "a setting's column needs its Column in columns.py"
    places = [s.baseline for s in RUN_SETTINGS if s.baseline]
    assert len(places) == len(set(places))


def test_grouping_keys_come_from_the_table():
    grouped = {s.csv_column for s in RUN_SETTINGS if s.grouped} | set(PARAM_COLUMNS)
    assert set(CONFIG_COLUMNS) == grouped
    assert tuple(CONFIG_KEYS) == CONFIG_COLUMNS
    # the schema's order, so tables and plots keep their layout
    assert list(CONFIG_COLUMNS) == [c for c in COLUMNS if c in grouped]


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: " ".join(o))
def test_hash_row_and_baseline_key_are_the_table(overrides):
    identity = identity_of(*overrides)
    fields = identity.hash_fields
    for setting in RUN_SETTINGS:
        value = run_settings.setting_value(setting, identity)
        if setting.hashed:
            left_out = setting.unhashed is not UNSET and value == setting.unhashed
            assert (setting.name in fields) is not left_out, setting.name
            if not left_out:
                assert fields[setting.name] == value, setting.name
    assert set(fields) <= {s.name for s in RUN_SETTINGS if s.hashed}

    row = identity.columns("r")
    table_columns = {s.csv_column for s in RUN_SETTINGS if s.csv_column is not None}
    assert set(row) == {"run_id", "config_hash", *table_columns, *PARAM_COLUMNS}
    assert row["config_hash"] == identity.config_hash

    conf = identity.conf
    by_hand = baseline_key(
        verifier_id=conf.model.verifier,
        task=conf.task.name,
        prompts=[[1, 2]],
        sampling={
            "temperature": conf.temperature,
            "top_p": conf.top_p,
            "top_k": conf.top_k,
            "dtype": identity.dtype,
            "verifier_revision": conf.model.verifier_revision,
            # the HF engine's counter-based draws, on sampled runs only
            **({"draws": "counter"} if identity.draws else {}),
        },
        max_new_tokens=conf.max_new_tokens,
        seed=conf.seed,
        device_name="cpu",
    )
    assert identity.baseline_key([[1, 2]], "cpu") == by_hand  # embedded pair: no hub commit


def test_verifier_values_and_kept_hashes():
    alone, spec = identity_of("sampler=verifier", "m=7"), identity_of("sampler=sps", "m=7")
    assert alone.hash_fields["m"] is None and alone.columns("r")["m"] is None
    assert spec.hash_fields["m"] == 7 and spec.columns("r")["m"] == 7
    assert alone.hash_fields["baseline"] == "none" == alone.columns("r")["baseline_mode"]
    assert alone.hash_fields["sampler_params"] == {}
    assert alone.columns("r")["sampler_params"] is None
    assert spec.columns("r")["sampler_params"] == {}
    assert alone.columns("r")["drafter_id"] is None
    assert spec.hash_fields["backend"] == "hf" and spec.columns("r")["backend"] == "hf"
    assert "repeats" not in spec.hash_fields
    fixed, auto = identity_of("model.dtype=float32"), identity_of("model.dtype=auto")
    assert "resolved_dtype" not in fixed.hash_fields
    assert auto.hash_fields["resolved_dtype"] == auto.dtype == auto.columns("r")["dtype"]


def test_a_new_setting_is_one_line(monkeypatch):
    """Appending one Setting reaches the hash, the row, the baseline key and the checks."""
    identity = identity_of("sampler=cactus")
    before = identity.config_hash, identity.baseline_key([[1]], "cpu")
    extra = (
        Setting(
            "new_knob",
            "a copy of the seed",
            source="conf.seed",
            column="seed_copy",
            kind="int",
            baseline="sampling.new_knob",
        ),
        Setting("quiet_knob", "repeats again", source="conf.repeats", column=None, unhashed=1),
        Setting(
            "repeats_checked",
            "repeats, checked harder",
            run_settings.Option(int, 1, run_settings.at_least(5), key="repeats"),
            column=None,
        ),
    )
    monkeypatch.setattr(run_settings.table, "RUN_SETTINGS", (*RUN_SETTINGS, *extra))
    fresh = dataclasses.replace(identity)  # cached properties are per instance
    assert fresh.hash_fields["new_knob"] == identity.conf.seed
    assert "quiet_knob" not in fresh.hash_fields  # at its unhashed default: hash unchanged
    assert fresh.columns("r")["seed_copy"] == identity.conf.seed
    assert fresh.config_hash != before[0]
    assert fresh.baseline_key([[1]], "cpu") != before[1]
    assert run_settings.check_options(identity.conf) == "repeats must be >= 5 (got 1)"


def test_out_of_head_c_default_is_the_engines_and_set_ones_are_hashed():
    from cactus_bench.engine.commit_stats import OUT_OF_HEAD_C
    from cactus_bench.run_settings.how_it_ran import OUT_OF_HEAD_C as SETTING_DEFAULT

    assert SETTING_DEFAULT == OUT_OF_HEAD_C  # one default: the run's is the engine's
    default, wider = identity_of("sampler=sps"), identity_of("sampler=sps", "out_of_head_c=0.1")
    assert "out_of_head_c" not in default.hash_fields  # 0.2 rows keep their hashes
    assert default.columns("r")["out_of_head_c"] == 0.2
    assert wider.hash_fields["out_of_head_c"] == 0.1 == wider.columns("r")["out_of_head_c"]
    assert "out_of_head_c" not in identity_of("sampler=verifier").hash_fields
