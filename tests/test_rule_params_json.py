"""A rule's typed parameters cross the vLLM worker boundary as JSON and come back equal, guards
included, and the rule built from either side behaves the same (no vLLM needed: the workers'
reader is cactus_bench.vllm.acceptance, importable without it)."""

from __future__ import annotations

import json

import pytest
import torch

from cactus_bench.samplers import registry
from cactus_bench.samplers.catalogue import RULE_NAMES, RULES, parse_sampler
from cactus_bench.samplers.params import GUARD_DEFAULTS
from cactus_bench.samplers.registry import build_rule, make_sampler, params_with_defaults
from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import lines, runner

# Every guard away from its default (what a run may set on a rule of the target family)
ALL_GUARDS = {"stop": "exact", "strict_first": 2, "relax_in": "think", "near_top": 0.25}
M = 3  # draft length of the fixed inputs below


def _params(name: str, guards: dict):
    """`name` at its defaults (m-dependent ones resolved), with `guards` where it takes them."""
    params = params_with_defaults(name, **(guards if RULES[name].target_family else {}))
    return params.at_draft_length(M)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_every_rule_round_trips_through_json_guards_included(name):
    params = _params(name, ALL_GUARDS)
    text = params.to_json()
    assert parse_sampler(json.loads(text)) == params  # the sampler node, read as a config's
    assert va.parse_rule_params(text) == params  # what the vLLM workers read from RULE_ENV
    assert va.rule_params_from_env({va.RULE_ENV: text}) == params
    if RULES[name].target_family:
        assert params.guards_set() == ALL_GUARDS  # all four made the trip, not only near_top


def _inputs(seed: int = 0, vocab: int = 7):
    """Fixed draft ids [4, M], drafter laws [4, M, V], verifier laws [4, M + 1, V]."""
    generator = torch.Generator().manual_seed(seed)
    draft = torch.rand(4, M, vocab, generator=generator, dtype=torch.float64).softmax(-1)
    target = torch.rand(4, M + 1, vocab, generator=generator, dtype=torch.float64).softmax(-1)
    ids = torch.multinomial(draft.view(-1, vocab), 1, generator=generator).view(4, M)
    return ids, draft, target


@pytest.mark.parametrize("name", RULE_NAMES)
def test_the_rule_built_from_the_json_behaves_as_the_runs(name):
    """Built in the run (`build_rule`) and in a worker (from RULE_ENV's text): equal parameters,
    guards and draws on fixed inputs. near_top, the guard vLLM runs, is set where it applies."""
    params = _params(name, {"near_top": 0.25})
    here, there = build_rule(params), va.parse_rule_spec(params.to_json())
    assert type(here) is type(there) and here.params() == there.params()
    assert here.guards == there.guards
    if RULES[name].target_family:
        assert there.guards.near_top == 0.25
    ids, draft, target = _inputs()
    unscaled = getattr(here, "reads_unscaled", False)
    laws = {"unscaled_draft_probs": draft, "unscaled_target_probs": target} if unscaled else {}
    outputs = [
        rule.verify(ids, draft, target, generator=torch.Generator().manual_seed(5), **laws)
        for rule in (here, there)
    ]
    assert torch.equal(outputs[0].token_ids, outputs[1].token_ids)
    assert torch.equal(outputs[0].num_accepted, outputs[1].num_accepted)


def test_the_json_is_the_sampler_node_with_only_the_guards_set():
    """The RULE_ENV text reads as a config's sampler node: an unguarded rule's carries no guard
    keys, and floats come back to the bit."""
    assert parse_sampler({"name": "cactus", "delta": 0.75}).to_json() == (
        '{"delta": 0.75, "name": "cactus"}'
    )
    text = parse_sampler({"name": "cactus", "delta": 0.1 + 0.2, "near_top": 0.2}).to_json()
    assert json.loads(text) == {"name": "cactus", "delta": 0.1 + 0.2, "near_top": 0.2}
    assert set(GUARD_DEFAULTS).isdisjoint(json.loads(params_with_defaults("sps").to_json()))
    ensemble = parse_sampler({"name": "ensemble", "w": 0.7})
    assert va.parse_rule_params(ensemble.to_json()) == ensemble  # the alias's own parameters
    assert va.parse_rule_spec(ensemble.to_json()).params() == {"alpha": 0.3}  # runs as interp


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"name": "cactus"}', "needs sampler.delta"),
        ('{"name": "cactus", "delta": 1.0, "near_top": 2}', "near_top must be in"),
        ('{"name": "tas", "threshold": 0.1, "alpha": 0.3, "near_top": 0.2}', "target pi"),
        ('{"name": "verifier"}', "unknown rule 'verifier'"),
        ('{"name": "cactus", "delta": 1.0, "checked": true}', "does not take checked"),
    ],
)
def test_a_bad_rule_env_is_one_line_where_it_is_read(text, match):
    """Every RULE_ENV value is parsed and checked the one way, whoever wrote it: no mark lets a
    value past the checks."""
    with pytest.raises(va.RuleSpecError, match=match) as error:
        va.parse_rule_spec(text)
    assert "\n" not in str(error.value) and va.RULE_ENV in str(error.value)


def test_make_sampler_parses_then_builds_with_the_rules_defaults(monkeypatch):
    built = []
    real = registry.build_rule
    monkeypatch.setattr(registry, "build_rule", lambda params: built.append(params) or real(params))
    assert make_sampler("cactus", delta=0.5, k=None).params() == {"delta": 0.5}
    assert built == [parse_sampler({"name": "cactus", "delta": 0.5})]
    tas = make_sampler("tas", threshold=0.25)  # the class's default: alpha = sqrt(threshold)
    assert built[-1] == parse_sampler({"name": "tas", "threshold": 0.25, "alpha": 0.5})
    assert tas.params() == {"threshold": 0.25, "alpha": 0.5}
    assert make_sampler("ensemble").name == "interp" == make_sampler("ensemble", w=0.7).name
    assert make_sampler("cactus", near_top=0.3).guards.near_top == 0.3


def _report(**changes) -> dict:
    report = {"line": lines.V1, "runner": "R", "v1": True, "rule": "cactus", "draft_law": True}
    return {**report, **changes}


def test_the_start_check_demands_the_runs_parameters_in_every_worker():
    sent = parse_sampler({"name": "cactus", "delta": 1.0, "near_top": 0.2}).to_json()
    runner.check_reports([_report(rule_params=sent)], "cactus", rule_json=sent)
    lost = parse_sampler({"name": "cactus", "delta": 1.0}).to_json()  # near_top dropped
    with pytest.raises(RuntimeError, match="did not reach the engine core intact") as error:
        runner.check_reports(
            [_report(rule_params=sent), _report(rule_params=lost)], "cactus", rule_json=sent
        )
    assert "\n" not in str(error.value)
