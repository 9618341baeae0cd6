"""The engine against the exact prediction: acceptance of the first draft on the same contexts.

For a random sample of context positions t (sequence i), the real `SpeculativeDecoder` decodes
prompt_i + context_i[:t] with m = 1 and max_new_tokens = 2 under the run's sampling: its one
draft n ~ p_t is accepted or not by the rule's `verify`, exactly the event whose probability the
frontier computes as beta_t. So over the sampled positions the engine's acceptance rate must
equal the mean predicted beta_t up to binomial noise: the check covers the whole chain (prompt
formatting, teacher forcing, token map, process_logits, support compaction, the exact formulas)
against the code path every task run uses. The interval is Wilson's 95 % for the engine's rate.
"""

from __future__ import annotations

import math

import torch
from tqdm.auto import tqdm

from cactus_bench.engine import SpeculativeDecoder
from cactus_bench.frontier.conf import FrontierConfigError
from cactus_bench.frontier.contexts import Contexts

CHECK_ARMS = (("sps", None), ("cactus", 1.0))  # (family, delta): the lossless rule and the paper's


def sample_positions(contexts: Contexts, count: int, seed: int) -> list[tuple[int, int, int]]:
    """`count` distinct (sequence, t, global position index), uniform over all positions."""
    lengths = [len(tokens) for tokens in contexts.tokens]
    total = sum(lengths)
    gen = torch.Generator().manual_seed(seed)
    chosen = sorted(torch.randperm(total, generator=gen)[: min(count, total)].tolist())
    starts, running = [], 0
    for length in lengths:
        starts.append(running)
        running += length
    out, sequence = [], 0
    for index in chosen:
        while index >= starts[sequence] + lengths[sequence]:
            sequence += 1
        out.append((sequence, index - starts[sequence], index))
    return out


def wilson_interval(successes: float, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial rate."""
    if trials == 0:
        return math.nan, math.nan
    rate = successes / trials
    denom = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denom
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denom
    return centre - half, centre + half


def engine_first_acceptance(
    pair,
    contexts: Contexts,
    positions,
    rule,
    sampling,
    seeds: int,
    seed: int,
    progress: bool = True,
) -> list[int]:
    """0/1 per (position, seed): did the engine accept its single draft at that position?"""
    device = next(pair.verifier.parameters()).device
    decoder = SpeculativeDecoder(
        pair.drafter,
        pair.verifier,
        pair.tokenizer,
        rule,
        num_draft_tokens=1,
        sampling=sampling,
        device=device,
        token_map=pair.token_map,
    )
    outcomes = []
    label = f"engine check ({rule.name})"
    for sequence, t, index in tqdm(positions, desc=label, disable=not progress):
        prefix = contexts.prompt_ids[sequence] + contexts.tokens[sequence][:t]
        for repeat in range(seeds):
            record = decoder.generate(
                prefix, max_new_tokens=2, seed=(seed * 7919 + index * 31 + repeat) % 2**31
            )
            if record.drafted_per_step[0] != 1:
                raise RuntimeError("the engine check expects one draft in the first step")
            outcomes.append(int(record.accepted_per_step[0]))
    return outcomes


def engine_check_arms(conf, arms) -> list[int]:
    """Indices of CHECK_ARMS in the grid (none when the check is off)."""
    if not conf.engine_check:
        return []
    found = []
    for family, value in CHECK_ARMS:
        index = next((i for i, a in enumerate(arms) if a.kind == family and a.value == value), None)
        if index is None:
            raise FrontierConfigError(
                f"frontier.engine_check needs the arm {family} {value or ''} in the grid: keep "
                "'cactus' in frontier.rules and 1.0 in frontier.deltas, or set engine_check=0"
            )
        found.append(index)
    return found


def engine_check_rows(conf, pair, contexts, arms, check_arms, measured, sampling) -> list[dict]:
    """The engine's first-draft acceptance against the prediction, per checked arm."""
    # Global position indices count positions only, in sequence order, as measure_positions.
    positions = sample_positions(contexts, conf.engine_check, conf.seed)
    rows = []
    for index in check_arms:
        arm = arms[index]
        outcomes = engine_first_acceptance(
            pair,
            contexts,
            positions,
            arm.sampler(),
            sampling,
            conf.engine_check_seeds,
            conf.seed,
            conf.progress,
        )
        beta = measured["stats"]["beta"][index, [g for _, _, g in positions]]
        predicted = float(beta.mean())
        low, high = wilson_interval(sum(outcomes), len(outcomes))
        base = {"rule": arm.rule, "parameter": arm.parameter, "n_positions": len(positions)}
        rows.append(
            {
                **base,
                "statistic": "engine_first_acceptance",
                "value": sum(outcomes) / len(outcomes),
                "ci_low": low,
                "ci_high": high,
            }
        )
        rows.append(
            {
                **base,
                "statistic": "predicted_first_acceptance",
                "value": predicted,
                "ci_low": None,
                "ci_high": None,
            }
        )
    return rows
