"""The chain every acceptance rule's `verify` runs: its decisions at the drafts in, tokens out.

A rule decides (`Decisions`), at each drafted position j, the probability a_j of accepting the
drafted token n_j, and the weights of the one token after the accepted prefix: the recovery at
the first rejected position, or the bonus (the verifier's row m) when all m drafts are accepted.
`base.AcceptanceRule.verify` asks the rule for them (`decide`) and runs the chain, for both
families: the rules that decide from [B, m] statistics (base.py) and the builders' plans
(kernel.py). The chain:

    u_j ~ U[0, 1)                 one draw per position, [B, m]
    accepted_j = u_j < a_j        (rules that decide by threshold: a_j >= 1/2, and no draw)
    k = number of leading accepts (num_accepted)
    token k ~ recovery_k  if k < m  else  bonus       (or the argmax of the verifier's row k)

Memory: the decisions are [B, m]; the last token's weights are built once per row, at position k
(`Decisions.last_token`, [B, V]), so a rule that decides from statistics holds O(B V) extra.
Random draws happen in a fixed order (torch.rand [B, m] in float32, then one float64 uniform per
row for the last token), so rules that coincide (Cactus at delta = 0, SpS, a builder whose plan
is SpS's) return identical tokens for one generator. `uniforms` [B, m + 1] replaces both draws:
the chain then reads nothing back to the host and traces into one graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class VerifyOutput:
    token_ids: torch.Tensor  # [B, m + 1] int64: accepted drafts, one recovered/bonus token, -1
    num_accepted: torch.Tensor  # [B] int64 in 0..m: accepted draft tokens (bonus not counted)


@dataclass(frozen=True)
class Prefix:
    """Where each row's accepted prefix ends ([B] each): what the last token's weights read."""

    rows: torch.Tensor  # int64 0..B-1, to index a row's position
    num_accepted: torch.Tensor  # int64 k in 0..m: the verifier's row of the last token
    position: torch.Tensor  # int64 min(k, m - 1): the draft a recovery reads (bonus rows: unused)
    rejected: torch.Tensor  # bool k < m: the last token is a recovery, else the bonus


@dataclass(frozen=True)
class LastToken:
    """The weights of the token after the accepted prefix: [B, V] non-negative rows, any scale."""

    bonus: torch.Tensor  # the verifier's row k: drawn from where k = m (all drafts accepted)
    recovery: torch.Tensor | None  # drawn from where k < m; None: the argmax of `bonus` there
    bonus_is_argmax: bool = False  # where k = m, the argmax of `bonus` instead of a draw


@dataclass(frozen=True)
class Decisions:
    """What a rule decides at the drafts (module doc)."""

    accept: torch.Tensor  # [B, m] a_j: probability of accepting drafted token j, in [0, 1]
    last_token: Callable[[Prefix], LastToken]  # the weights at each row's position k
    by_threshold: bool = False  # accepted_j = a_j >= 1/2 and no acceptance draw (TAS, greedy)
    # [B, m] bool decisions -> [B, m] bool, for a rule whose decision at j reads the decisions
    # after it (FLy's deferred window); applied before the accepted prefix is counted
    across_window: Callable[[torch.Tensor], torch.Tensor] | None = None


def verify_chain(
    ids: torch.Tensor,  # [B, m] int64 drafted tokens
    decisions: Decisions,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,  # [B, m + 1] float64 in [0, 1)
) -> VerifyOutput:
    """The accepted prefix from a_j and the token after it (module doc). `uniforms[:, j]`
    replaces the draw of position j and `uniforms[:, m]` the last token's."""
    batch, m = ids.shape
    accept = decisions.accept
    if decisions.by_threshold:
        accepted = accept >= 0.5
    else:
        accepted = acceptance_uniforms(batch, m, generator, accept.device, uniforms) < accept
    if decisions.across_window is not None:
        accepted = decisions.across_window(accepted)
    num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B]
    rows = torch.arange(batch, device=ids.device)
    rejected = num_accepted < m  # [B]
    prefix = Prefix(rows, num_accepted, num_accepted.clamp(max=m - 1), rejected)
    last = decisions.last_token(prefix)
    uniform = None if uniforms is None else uniforms[:, m]
    return emitted(ids, num_accepted, token_after_prefix(last, rejected, generator, uniform))


def token_after_prefix(last: LastToken, rejected, generator, uniform) -> torch.Tensor:
    """[B] the token after the accepted prefix: recovered where `rejected`, else the bonus. One
    uniform per row is drawn unless both are argmaxes."""
    recovery_is_argmax = last.recovery is None
    if recovery_is_argmax or last.bonus_is_argmax:
        argmax = last.bonus.argmax(dim=-1)
        if recovery_is_argmax and last.bonus_is_argmax:
            return argmax
    if recovery_is_argmax:
        weights = last.bonus  # rejected rows take the argmax; the others draw the bonus
    else:
        weights = torch.where(rejected.unsqueeze(-1), last.recovery, last.bonus)
    sampled = sample_categorical(weights, generator, uniform)
    if recovery_is_argmax:
        return torch.where(rejected, argmax, sampled)
    if last.bonus_is_argmax:
        return torch.where(rejected, sampled, argmax)
    return sampled


def sample_categorical(
    weights: torch.Tensor, generator: torch.Generator | None, uniform: torch.Tensor | None = None
) -> torch.Tensor:
    """[R] one index per row of non-negative weights [R, V], by inverting the float64 CDF.

    One uniform per row, so the generator advances by R draws whatever V is; at V ~ 150k this is
    several times faster on CPU than torch.multinomial (an exponential draw per entry). Entries
    of zero weight are never returned (strict inequality in the search). `uniform` [R] float64
    in [0, 1), when given, is used instead of the draw (the engine's per-row streams).
    """
    cdf = weights.to(torch.float64).cumsum(dim=-1)  # [R, V]
    total = cdf[:, -1:]
    if uniform is None:
        uniform = torch.rand(
            total.shape, generator=generator, device=weights.device, dtype=torch.float64
        )
    else:
        uniform = uniform.to(torch.float64).unsqueeze(-1)  # [R, 1]
    index = torch.searchsorted(cdf, uniform * total, right=True).squeeze(-1)
    # u * total < total in exact arithmetic; guard the rounding case at the top end.
    last_positive = weights.shape[-1] - 1 - (weights.flip(-1) > 0).to(torch.int8).argmax(-1)
    return torch.minimum(index, last_positive)


def acceptance_uniforms(batch, m, generator, device, uniforms) -> torch.Tensor:
    """[B, m] the acceptance draws: uniforms[:, :m] when given, else torch.rand in float32 (the
    order and dtype every rule has drawn in, so one generator keeps giving the same tokens)."""
    if uniforms is not None:
        return uniforms[:, :m]
    return torch.rand((batch, m), generator=generator, device=device, dtype=torch.float32)


def emitted(ids: torch.Tensor, num_accepted: torch.Tensor, last_token: torch.Tensor):
    """VerifyOutput from the drafts [B, m], the accepted counts [B] and the last tokens [B]."""
    batch, m = ids.shape
    token_ids = torch.full((batch, m + 1), -1, dtype=torch.long, device=ids.device)
    keep = torch.arange(m, device=ids.device).unsqueeze(0) < num_accepted.unsqueeze(1)
    token_ids[:, :m] = torch.where(keep, ids, token_ids[:, :m])
    rows = torch.arange(batch, device=ids.device)
    token_ids[rows, num_accepted] = last_token
    return VerifyOutput(token_ids=token_ids, num_accepted=num_accepted)
