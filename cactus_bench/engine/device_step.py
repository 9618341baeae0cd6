"""The tensor-only parts of a batched speculative step: the drafter's m-step loop, and the rule
over the verifier's laws. Each takes and returns tensors of the step's S slots only (the host
passes shapes and settings, never data), reads nothing back and builds nothing from host data,
so it traces whole (`torch.compile(fullgraph=True, dynamic=False)`, tests/test_device_step.py)
and a CUDA graph can capture it.

- `draft_loop`: m' times: the drafter's forward, its processed law p_j, the draw n_j ~ p_j from
  the step's uniforms, and n_j as the next input (rows done drafting are fed nothing).
- `apply_rules`: each row's rule on (drafts, p, q) with its own uniforms, or the bonus token
  drawn from q where a row made no draft, into the step's emitted tokens [S, m + 1]. A rule
  with per-position guards (strict_first, relax_in = think) gets its `relax` mask, built here
  from the rows' guard state in the slots' buffers (`GuardState`, samplers/guards.py).
- `verify_side`: everything between the draft loop and the step's one read: the verifier's
  forward, its processed laws, the bad-law flags, `apply_rules` on the rows' guard state, the
  out-of-head count (commit_stats.py) and the slots' advance (think state included) with the
  caches' roll-back (under CUDA graphs the second captured graph, step_graphs.py).

A slot with no request (budget 0) takes part with junk values; its flags are masked and its
emitted tokens stay -1. batch_steps.py runs them with the engine's forwards; the uniforms'
layout is draws.step_uniforms (columns: m DRAFT, m ACCEPT, 1 LAST).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_bench.engine.commit_stats import step_out_of_head
from cactus_bench.engine.sampling import bad_rows, draw_tokens
from cactus_bench.samplers.guards import NO_GUARDS, relax_mask


@dataclass
class Drafts:
    """The drafter loop's outputs for S slots and m' drafts."""

    ids: torch.Tensor  # [S, m'] sampler-space ids (junk past a row's m_b)
    probs: list[torch.Tensor]  # m' x [S, K] processed laws p_j
    unscaled: list[torch.Tensor]  # m' x [S, K] temperature-1 laws (rules that read them), or []
    bad: torch.Tensor  # [S] bool: a drafting row's law could not be sampled


def draft_loop(forward, process, to_vocab, ids, counts, drafts, draws, greedy, steps, unscaled):
    """forward(j, ids [S, w], counts [S]) -> logits [S, 1, K] at each row's last real token;
    process: logits [S, K] -> laws [S, K]; ids/counts: the first forward's inputs (what each
    drafter has still to read); drafts [S] m_b; draws [S, >= steps] the DRAFT uniforms; greedy
    [S] bool; steps m' = max m_b (host int); unscaled: keep the temperature-1 laws too."""
    tokens, laws, unscaled_laws = [], [], []
    bad = torch.zeros_like(greedy)
    for j in range(steps):
        logits = forward(j, ids, counts)[:, -1]  # [S, K]
        probs = process(logits)  # [S, K] each drafting row's p_j
        token = draw_tokens(probs, draws[:, j], greedy)  # [S] n_j ~ p_j
        bad = bad | (bad_rows(probs) & (drafts > j))
        tokens.append(token)
        laws.append(probs)
        if unscaled:
            unscaled_laws.append(logits.float().softmax(-1))
        ids = to_vocab(token)[:, None]  # [S, 1] fed to the rows still drafting
        counts = (drafts > j + 1).long()
    if tokens:
        stacked = torch.stack(tokens, 1)
    else:
        stacked = torch.zeros((greedy.shape[0], 0), dtype=torch.long, device=greedy.device)
    return Drafts(stacked, laws, unscaled_laws, bad)


@dataclass
class RuleGroup:
    """Rows of a step that share a rule and a draft count (host values)."""

    rule: object
    count: int  # m_b of its rows
    mask: torch.Tensor | None  # [S] bool: its rows; None when it holds every slot
    support_width: int | None  # `verify`'s support_width for its rows
    greedy_bonus: bool  # its bonus token is the argmax (the rule's `bonus_is_argmax`)


@dataclass(frozen=True)
class VerifyHost:
    """Host values the verify side bakes in (part of its graph's key): the sampler-space
    (<think>, </think>) ids the rows' think state follows, or (); the out-of-head threshold c."""

    think: tuple
    out_of_head_c: float


@dataclass
class GuardState:
    """The rows' state the per-position guards read (slot_state.py), at the step's start."""

    offsets: torch.Tensor  # [S] int64: answer tokens emitted before the step
    in_think: torch.Tensor  # [S] bool: inside <think> at the step's start
    think: tuple  # (open, close) sampler-space <think>, </think> ids, or () without them


def apply_rules(
    groups, drafts: Drafts, target, logits, draws, greedy, m: int, guard: GuardState | None = None
) -> torch.Tensor:
    """The step's emitted tokens [S, m + 1]: per row, its accepted drafts then the recovered or
    bonus token, -1 after. target [S, m' + 1, K] the processed q; logits the verifier's
    restricted logits (for rules that read unscaled laws); draws [S, 2m + 1] (step_uniforms);
    guard: the rows' guard state, for rules with per-position guards."""
    rows = target.shape[0]
    accept_u, last_u = draws[:, m : 2 * m], draws[:, 2 * m]  # [S, m], [S]
    emitted = torch.full((rows, m + 1), -1, dtype=torch.long, device=target.device)
    for group in groups:
        count = group.count
        if count == 0:  # one token left: the verifier's token is the bonus, drawn from q
            out = draw_tokens(target[:, 0], last_u, greedy | group.greedy_bonus)[:, None]
        else:
            extra = {}
            if getattr(group.rule, "reads_unscaled", False):
                extra["unscaled_draft_probs"] = torch.stack(drafts.unscaled[:count], 1)
                extra["unscaled_target_probs"] = logits[:, : count + 1].float().softmax(-1)
            guards = getattr(group.rule, "guards", NO_GUARDS)
            if guards.per_position:  # [S, m_b] True: the rule's law at that position
                if guard is None:
                    raise ValueError(f"{guards} need the rows' guard state (apply_rules guard=)")
                state = (guard.offsets, guard.in_think, drafts.ids[:, :count])
                extra["relax"] = relax_mask(*state, guards, *guard.think)
            out = group.rule.verify(
                drafts.ids[:, :count],  # [S, m_b]
                torch.stack(drafts.probs[:count], 1),  # [S, m_b, K]
                target[:, : count + 1],  # [S, m_b + 1, K]
                uniforms=torch.cat([accept_u[:, :count], last_u[:, None]], dim=1),
                check=False,
                support_width=group.support_width,
                **extra,
            ).token_ids  # [S, m_b + 1]
        if group.mask is None:
            emitted[:, : count + 1] = out
        else:
            kept = emitted[:, : count + 1]
            emitted[:, : count + 1] = torch.where(group.mask[:, None], out, kept)
    return emitted


def verify_side(
    forward, process, to_vocab, state, loop_out, rule_groups, m, caches, host, between=None
):
    """The step's tensors for its one read: (emitted [S, m + 1], bad [S] bool, out_of_head [S]
    int64). forward(ids [S, 1 + m'], counts [S]) -> the verifier's restricted logits at every
    position; state: the span's `SlotView`; loop_out: the draft loop's (drafts [S] m_b, draws
    [S, 2m + 1], Drafts); rule_groups(drafts) -> [RuleGroup] (their masks built here, from
    device state); caches: the span's caches, rolled back by `SlotView.advance`; host: the
    step's `VerifyHost` (host values a graph bakes in). between(): called after the laws,
    before the rule (the eager path marks its clock there; None inside a graph)."""
    drafts, draws, drafted = loop_out
    most = drafted.ids.shape[1]  # m'
    active = state.active  # [S] bool
    ids = torch.cat([state.verifier_id[:, None], to_vocab(drafted.ids)], dim=1)  # [S, 1 + m']
    logits = forward(ids, (1 + drafts) * active)[:, : most + 1]  # [S, m' + 1, K] (may be wider)
    target = process(logits)  # [S, m' + 1, K]: each row's q_1..q_{m_b + 1}
    used = (torch.arange(most + 1, device=ids.device) <= drafts[:, None]) & active[:, None]
    bad = drafted.bad | (bad_rows(target.flatten(0, 1)).view(used.shape) & used).any(-1)
    if between is not None:
        between()
    guard = GuardState(state.answer_offsets, state.in_think, host.think)  # before `advance`
    groups = rule_groups(drafts)
    emitted = apply_rules(groups, drafted, target, logits, draws, state.greedy, m, guard)
    # [S] accepted drafts with q(x) < c max q (commit_stats.py), read with the tokens
    off_head = step_out_of_head(target, drafted.ids, emitted, host.out_of_head_c)
    state.advance(emitted, drafts, to_vocab, caches, host.think)
    return emitted, bad, off_head
