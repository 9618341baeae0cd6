"""scripts/rules_board.py's arms: 2026's rules are on the board, each arm's sampler node parses
as a run's would and builds its rule, the guarded arms carry their guard, and no two arms are the
same run."""

import json

from helpers.scripts import load_script

from cactus_bench.samplers import RULES, make_sampler
from cactus_bench.samplers.catalogue import parse_sampler


def _board():
    return load_script("rules_board")


def test_every_board_arm_parses_builds_and_is_distinct():
    arms = _board().ARMS
    seen = set()
    for name, params in arms:
        node = (
            {**make_sampler(name, **params).params(), **params}
            if not RULES[name].alias_of
            else params
        )
        parsed = parse_sampler({"name": name, **node})  # a one-line ValueError when it does not
        assert parsed.info.name == name
        key = (name, json.dumps(node, sort_keys=True))
        assert key not in seen, key
        seen.add(key)
    on_board = {name for name, _ in arms}
    assert {"topband", "topband_cascade", "additive", "greedy_margin"} <= on_board


def test_the_guarded_arms_are_cactus_at_delta_one_with_stop_exact_and_near_top():
    guarded = [(n, p) for n, p in _board().ARMS if set(p) & {"stop", "near_top"}]
    assert guarded == [
        ("cactus", {"delta": 1.0, "stop": "exact"}),
        ("cactus", {"delta": 1.0, "near_top": 0.2}),
    ]
    for name, params in guarded:
        rule = make_sampler(name, **params)
        assert rule.guards.stop == params.get("stop", "off")
        assert rule.guards.near_top == params.get("near_top", 0.0)
