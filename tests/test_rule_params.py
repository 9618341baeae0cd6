"""Each rule's parameters as one frozen dataclass, parsed once from a sampler node, and the CSV's
parameter columns taken from the catalogue (samplers/params.py, samplers/catalogue.py)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from cactus_bench.samplers.catalogue import (
    NO_RULE,
    PARAM_COLUMN_DOCS,
    PARAM_COLUMNS,
    RULES,
    param_columns,
    parse_sampler,
)
from cactus_bench.samplers.params import GUARDS
from cactus_bench.samplers.registry import build_rule
from cactus_bench.store.columns import SCHEMA
from cactus_bench.store.schema import COLUMNS


def test_each_rule_yields_a_frozen_dataclass_of_its_parameters_in_order():
    for name, info in RULES.items():
        cls = info.params_type
        guards = [p.name for p in GUARDS] if info.target_family else []  # the guards, last
        assert [field.name for field in dataclasses.fields(cls)] == [
            *(p.name for p in info.params),
            *guards,
        ]
        assert cls.info is info and cls is info.params_type, name  # made once per rule
    cactus = parse_sampler({"name": "cactus", "delta": 1})
    assert type(cactus).__name__ == "CactusParams" and cactus.delta == 1.0
    assert isinstance(cactus.delta, float)  # typed: an int on the command line becomes 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        cactus.delta = 2.0


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"name": "cactus", "detla": 1.0}, "sampler 'cactus' does not take detla \\(did you mean"),
        ({"name": "sps", "delta": 0.5}, "sampler 'sps' does not take delta \\(it takes no param"),
        ({"name": "cactus", "delta": -0.5}, "delta must be >= 0 for cactus"),
        ({"name": "tas", "threshold": 1.5, "alpha": 0.3}, r"threshold must be in \(0, 1\]"),
        ({"name": "topk", "k": 2.5}, "k must be an integer for topk"),
        ({"name": "cactus_exact", "delta": 1.0, "divergence": "kll"}, "did you mean 'kl'"),
        ({"name": "tas", "threshold": 0.1}, "sampler 'tas' needs sampler.alpha"),
        ({"name": "verifier", "delta": 1.0}, r"sampler 'verifier' takes no parameters"),
        ({"name": "cactux"}, "unknown sampler 'cactux' \\(did you mean 'cactus'\\?\\)"),
    ],
)
def test_an_unknown_missing_or_out_of_range_parameter_is_one_line(node, message):
    with pytest.raises(ValueError, match=message) as error:
        parse_sampler(node)
    assert "\n" not in str(error.value)


def test_the_dataclass_itself_rejects_an_unknown_or_out_of_range_parameter():
    cactus_params = RULES["cactus"].params_type
    with pytest.raises(TypeError, match="alpha"):
        cactus_params(delta=1.0, alpha=0.5)
    with pytest.raises(ValueError, match="delta must be >= 0 for cactus"):
        cactus_params(delta=-0.1)
    with pytest.raises(ValueError, match="delta must be a number"):
        cactus_params(delta="big")
    assert cactus_params(delta=2) == cactus_params(delta=2.0)


def test_the_csv_parameter_columns_are_the_catalogues_in_order():
    start = COLUMNS.index("sampler") + 1
    assert tuple(COLUMNS[start : start + len(PARAM_COLUMNS)]) == PARAM_COLUMNS
    assert tuple(PARAM_COLUMN_DOCS) == PARAM_COLUMNS
    owners = {
        p.csv_column: p for info in RULES.values() for p in info.params + GUARDS if p.csv_column
    }
    assert set(owners) == set(PARAM_COLUMNS)
    for column in PARAM_COLUMNS:
        assert SCHEMA[column].kind == owners[column].kind.__name__, column
        assert SCHEMA[column].doc == PARAM_COLUMN_DOCS[column], column


def test_a_rows_parameter_columns_hold_the_parsed_values():
    fly = parse_sampler(
        {"name": "fly", "entropy_threshold": 0.3, "window": "auto", "entropy_top_k": 3}
    ).at_draft_length(4)
    columns = param_columns(fly)
    assert list(columns) == list(PARAM_COLUMNS)
    assert (columns["threshold"], columns["fly_window"]) == (0.3, 3)  # auto = min(6, m - 1)
    assert sum(value is not None for value in columns.values()) == 2  # entropy_top_k: JSON only
    assert set(param_columns(NO_RULE).values()) == {None}


def test_an_alias_records_the_rule_that_runs():
    ensemble = parse_sampler({"name": "ensemble", "w": 0.7})
    assert ensemble.values() == {"w": 0.7}
    assert ensemble.runs_with() == {"alpha": 0.3}  # what the hash and sampler_params hold
    assert build_rule(ensemble).params() == ensemble.runs_with()


def test_parameters_survive_pickling_and_build_their_rule():
    cactus = parse_sampler({"name": "cactus", "delta": 0.5})
    assert pickle.loads(pickle.dumps(cactus)) == cactus
    assert pickle.loads(pickle.dumps(NO_RULE)) == NO_RULE
    assert build_rule(cactus).params() == {"delta": 0.5}


SAMPLER_CONFIGS = sorted(
    path.stem
    for path in (Path(__file__).resolve().parents[1] / "configs" / "sampler").glob("*.yaml")
    if path.stem != "verifier"
)


@pytest.mark.parametrize("preset", SAMPLER_CONFIGS)
def test_what_a_run_records_is_what_its_rule_runs_with(preset):
    """The hash and the row's sampler_params read `runs_with()`, the rule its `params()`: the
    two agree, key order included, for every sampler config."""
    import dataclasses

    from helpers.runs import compose_run_conf

    from cactus_bench.run import validate
    from cactus_bench.samplers.guards import NO_GUARDS

    rule_params = validate(compose_run_conf([f"sampler={preset}", "m=3"]))
    rule = build_rule(rule_params)
    # the guards the built rule holds away from their defaults follow its own parameters
    guards = getattr(rule, "guards", NO_GUARDS)
    held = {
        field.name: getattr(guards, field.name)
        for field in dataclasses.fields(guards)
        if getattr(guards, field.name) != getattr(NO_GUARDS, field.name)
    }
    assert list({**rule.params(), **held}.items()) == list(rule_params.runs_with().items())
