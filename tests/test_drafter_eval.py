"""cactus_bench.bench.drafter_eval (scripts/eval_drafter.py): the cost model on worked numbers,
and the step costs and end-to-end measures on the tiny pair."""

from __future__ import annotations

import pytest

from cactus_bench.bench.drafter_eval import (
    cost_model_speedup,
    cost_report,
    end_to_end,
    measure_costs,
)
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.models import LoadedPair
from cactus_bench.models.tiny import make_tiny_pair


def test_cost_model_speedup_on_worked_numbers():
    # E[tokens per step] = (1 - 0.5^3) / (1 - 0.5) = 1.75 over a step costing 2 * 0.1 + 1.2
    assert cost_model_speedup(0.5, 2, 0.1, 1.2) == pytest.approx(1.75 / 1.4)
    assert cost_model_speedup(1.0, 3, 0.0, 1.0) == 4  # every draft accepted: m + 1 tokens


def test_cost_report_relates_every_step_to_one_verifier_step():
    times = {"draft_1": 0.01, "verify_1": 0.1, "verify_2": 0.12, "verify_3": 0.15}
    times["ratio_spread"] = {"median": 0.1, "q25": 0.09, "q75": 0.11, "p10": 0.08, "p90": 0.12}
    report = cost_report(times, alpha=0.5, max_m=2)
    assert report["drafter_over_verifier"] == pytest.approx(0.1)
    assert report["verify_m_plus_1_over_1"] == pytest.approx({1: 1.2, 2: 1.5})
    assert report["cost_model_speedup"][2] == pytest.approx(1.75 / (2 * 0.1 + 1.5))
    assert report["drafter_over_verifier_per_repeat"] is times["ratio_spread"]


def test_costs_and_end_to_end_on_the_tiny_pair():
    drafter, verifier, tokenizer = make_tiny_pair(seed=0)
    pair = LoadedPair(drafter, verifier, tokenizer, "tiny", "tiny")
    times = measure_costs(pair, list(range(3, 19)), max_m=2, repeats=3, clock="cpu")
    assert set(times) == {"draft_1", "verify_1", "verify_2", "verify_3", "ratio_spread"}
    assert all(times[key] > 0 for key in ("draft_1", "verify_1", "verify_3"))
    result = end_to_end(pair, ["a b c", "d e"], PAPER_SAMPLING, m=2, new_tokens=8)
    assert result["prompts"] == 2 and 0 <= result["accepted_over_drafted"] <= 1
    assert 1 <= result["tokens_per_step"] <= 3  # at most m accepted drafts and one more token
    assert result["speedup"] > 0
