"""A batched speculative step's rule groups: their host shape (`rule_plan`, part of the verify
graph's key, step_graphs.py) and, from it, the groups with their device masks (`rule_groups_of`,
built inside `device_step.verify_side`, so inside the captured graph).

Why a plan: a captured verify side bakes in every host value it read (which rule, how many
drafts, whether a group is masked, its support width, whether its rule has per-position guards,
the think ids its guards and the slots' think state follow, the out-of-head threshold); the
plan holds them all, so two steps share a graph only when they would have traced the same ops.
Device values (the rows' answer offsets, think state, draft counts) need no place in it: the
graph reads them from the slots' buffers on each replay.
"""

from __future__ import annotations

from typing import NamedTuple

from cactus_bench.engine.batched import Row
from cactus_bench.engine.device_step import RuleGroup, VerifyHost
from cactus_bench.samplers.guards import NO_GUARDS


class RulePlan(NamedTuple):
    """groups: per group (its rule is the greedy one, m_b, masked, support width, guarded),
    sorted; host: the verify side's other host values."""

    groups: tuple
    host: VerifyHost


def rule_plan(decoder, rows: list[Row], rules: list, wanted: list[int], span: int) -> RulePlan:
    """The host shape of the step's rule groups (rows grouped by (rule, m_b)), sorted so the
    same groups in another order reuse one graph."""
    members: dict[tuple, list[int]] = {}
    for position, (rule, count) in enumerate(zip(rules, wanted, strict=True)):
        members.setdefault((rule is decoder.greedy_sampler, count), []).append(position)
    whole = len(members) == 1 and len(rows) == span
    groups = []
    for (greedy, count), positions in members.items():
        rule = decoder.greedy_sampler if greedy else decoder.sampler
        guarded = getattr(rule, "guards", NO_GUARDS).per_position  # its rows get a relax mask
        width = _support_width([rows[i] for i in positions])
        groups.append((greedy, count, not whole, width, guarded))
    ordered = tuple(sorted(groups, key=lambda group: group[:2]))  # masks are disjoint
    return RulePlan(ordered, VerifyHost(_think_ids(decoder), float(decoder.out_of_head_c)))


def rule_groups_of(decoder, plan: RulePlan, state, drafts) -> list[RuleGroup]:
    """The plan's groups, each with its device mask (None: the group is the span): one rule
    call per group, usually one per step. Masks come from the slots' device state."""
    bonus_is_argmax = getattr(decoder.sampler, "bonus_is_argmax", False)
    groups = []
    for greedy, count, masked, width, _guarded in plan.groups:
        rule = decoder.greedy_sampler if greedy else decoder.sampler
        mask = None
        if masked:
            mask = (drafts == count) & state.active
            if decoder.greedy_sampler is not decoder.sampler:
                mask = mask & (state.greedy == greedy)
        groups.append(RuleGroup(rule, count, mask, width, bonus_is_argmax))
    return groups


def _think_ids(decoder) -> tuple:
    """The sampler-space (<think>, </think>) ids the rows' think state follows, or ()."""
    think_ids = decoder.think_ids
    return () if think_ids is None else (int(think_ids.open), int(think_ids.close))


def _support_width(rows: list[Row]) -> int | None:
    """Columns a rule may restrict each row to: with top-k on, p and q each keep <= k tokens,
    so their union holds <= 2k; None (full rows) where a row samples without top-k."""
    top_k = [row.params.top_k for row in rows]
    return None if 0 in top_k else 2 * max(top_k)
