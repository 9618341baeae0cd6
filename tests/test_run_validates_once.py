"""A run validates its configuration once: run.py validates before anything heavy is imported
and hands the rule's checked parameters on; `run(conf)` alone validates first, itself."""

from __future__ import annotations

import pytest
from helpers.runs import compose_tiny

from cactus_bench.run import orchestrate, validate


class Stop(Exception):
    """Raised where measuring would start: the checks are all behind us."""


@pytest.fixture
def counted(monkeypatch):
    calls = []

    def counting_validate(conf):
        calls.append(conf)
        return validate(conf)

    def stop(identity, rule):
        raise Stop

    monkeypatch.setattr(orchestrate, "validate", counting_validate)
    monkeypatch.setattr(orchestrate, "measure", stop)
    return calls


def test_run_validates_once(tmp_path, counted):
    conf = compose_tiny(tmp_path, "sampler=cactus", "delta=0.5")
    with pytest.raises(Stop):
        orchestrate.run(conf)
    assert len(counted) == 1


def test_checked_rule_params_are_not_validated_again(tmp_path, counted):
    conf = compose_tiny(tmp_path, "sampler=cactus", "delta=0.5")
    rule_params = validate(conf)  # what run.py does before importing the run's machinery
    with pytest.raises(Stop):
        orchestrate.run(conf, rule_params)
    assert counted == []
