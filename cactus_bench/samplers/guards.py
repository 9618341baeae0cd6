"""The guards: settings that compose with any rule of the target family (docs/rules.md, Guards).

A rule of the family verifies against a target pi: accept n with min(1, pi(n) / p(n)), resample
norm((pi - p)+) (Cactus: pi set by the drafted n too). The guards change where and how far the
rule departs from speculative sampling (SpS, pi = q), with laws tested exactly
(tests/test_samplers_guards.py):

  stop: exact        pi' = q on the stop set S and pi (1 - q(S)) / (1 - pi(S)) off S, so the
                     emitted token keeps q's stop mass exactly (`stop_target`); for Cactus, whose
                     target moves with n, `stop_plan` keeps its acceptance scaled by
                     t = min(1, (1 - q(S)) / law(S^c)) off S and SpS's on S, and its residual
                     makes the law exactly pi' built from Cactus's emitted law
  near_top: c        the rule where the drafted n has q(n) >= c max q, SpS (test and residual)
                     where it has not: a choice per draft, made inside verify
  strict_first: L    SpS at an answer's first L tokens                    } a [B, m] mask the
  relax_in: think    the rule inside <think>...</think>, SpS outside      } engine passes as
                                                                            verify(relax=...)

`relax` [B, m] bool: True = the rule's law at that drafted position, False = SpS's. The
engine builds it on the device with `relax_mask` from each row's answer offset and think state
at the block's start (`think_after` carries that state from one step to the next), so no value
is read back to the host. All functions here are pure and capturable (no host read).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_bench.samplers.exact import threshold_law


@dataclass(frozen=True)
class Guards:
    """A rule's guards (params.GUARDS); the defaults leave the rule unchanged."""

    stop: str = "off"
    strict_first: int = 0
    relax_in: str = "all"
    near_top: float = 0.0

    @property
    def per_position(self) -> bool:
        """True when the engine must pass verify a `relax` mask (strict_first, relax_in)."""
        return self.strict_first > 0 or self.relax_in == "think"

    @property
    def stop_exact(self) -> bool:
        return self.stop == "exact"


NO_GUARDS = Guards()


def sps_plan(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SpS's (a, r) [..., V]: a = min(1, q / p) (1 where p = 0), r = (q - p)+."""
    safe = torch.where(p > 0, p, torch.ones_like(p))
    accept = torch.where(p > 0, q / safe, torch.ones_like(p)).clamp(max=1.0)
    return accept, (q - p).clamp(min=0)


def against_target(p: torch.Tensor, pi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, r) of GenSpecSample for target pi: a = min(1, pi / p) (1 where p = 0), r = (pi - p)+."""
    ratio = torch.where(p > 0, pi / torch.where(p > 0, p, torch.ones_like(p)), torch.ones_like(p))
    return ratio.clamp(max=1.0), (pi - p).clamp(min=0)


def guarded_law(p, q, accept, residual, guards: Guards, stop=None):
    """([...] beta, [..., V] law) of a plan (a, r) [..., V] under the position-free guards:
    stop=exact re-targets it to stop_target (stop [V] bool), then near_top mixes it with SpS
    candidate by candidate (docs/rules.md, G1-G2). p, q normalised float64."""
    if guards.stop_exact:
        beta, law = threshold_law(p, accept, residual)
        accept, residual = against_target(p, stop_target(law, q, stop))
    if guards.near_top <= 0:
        return threshold_law(p, accept, residual)
    near = q >= guards.near_top * q.amax(-1, keepdim=True)
    sps_accept, sps_residual = sps_plan(p, q)
    mixed = torch.where(near, accept, sps_accept)
    law = p * mixed
    for keep, a, r in ((near, accept, residual), (~near, sps_accept, sps_residual)):
        rejected = (p * (1 - a) * keep).sum(-1, keepdim=True)
        mass = r.sum(-1, keepdim=True)
        law = law + rejected * r / torch.where(mass > 0, mass, torch.ones_like(mass))
    return (p * mixed).sum(-1), law


def stop_mask(stop_ids: torch.Tensor, vocab: int, device) -> torch.Tensor:
    """[V] bool: True on the stop ids (sampler-space indices; ids outside [0, V) are dropped)."""
    ids = stop_ids.to(device=device, dtype=torch.long)
    inside = (ids >= 0) & (ids < vocab)
    mask = torch.zeros(vocab + 1, dtype=torch.bool, device=device)
    return mask.scatter(0, torch.where(inside, ids, vocab), True)[:vocab]


def stop_target(law: torch.Tensor, q: torch.Tensor, stop: torch.Tensor) -> torch.Tensor:
    """pi' [..., V]: q on the stop set (stop [V] bool), `law` rescaled to 1 - q(S) off it; q off
    S where the law has no mass there. Rows normalised float64."""
    off = ~stop
    q_off = (q * off).sum(-1, keepdim=True)  # 1 - q(S)
    law_off = (law * off).sum(-1, keepdim=True)
    scale = q_off / torch.where(law_off > 0, law_off, torch.ones_like(law_off))
    rescaled = torch.where(law_off > 0, law * scale, q)
    return torch.where(stop, q, rescaled)


def stop_plan(p, q, accept, law, stop) -> tuple[torch.Tensor, torch.Tensor]:
    """(a', r') [..., V] whose kernel law is exactly stop_target(law, q, stop), from a rule's
    per-token acceptance `accept` and its emitted `law` (law >= p accept token by token, as
    every kernel's law is). SpS's test on S; off S the rule's test scaled by
    t = min(1, (1 - q(S)) / law(S^c)); r' = pi' - p a' >= 0 (module doc)."""
    target = stop_target(law, q, stop)
    off = ~stop
    law_off = (law * off).sum(-1, keepdim=True)
    q_off = (q * off).sum(-1, keepdim=True)
    t = torch.where(law_off > 0, q_off / torch.where(law_off > 0, law_off, 1.0), 1.0)
    t = t.clamp(max=1.0)
    scaled = torch.where(stop, sps_plan(p, q)[0], accept * t)
    return scaled, (target - p * scaled).clamp(min=0)


def near_top_mask(q_n: torch.Tensor, q_max: torch.Tensor, c: float) -> torch.Tensor:
    """[B, m] bool: the drafted token's q(n) >= c max q (c = 0: everywhere)."""
    return q_n >= c * q_max


def think_states(
    in_think: torch.Tensor, drafts: torch.Tensor, think_open: int, think_close: int
) -> torch.Tensor:
    """[B, m] bool: inside <think> before drafted position j, from the state at the block's start
    (in_think [B] bool) and the markers drafted at positions < j (a drafted </think> closes)."""
    batch, m = drafts.shape
    marker = (drafts == think_open).long() - (drafts == think_close).long()  # [B, m]: +1, -1, 0
    index = torch.arange(m, device=drafts.device).expand(batch, m)
    last = torch.where(marker != 0, index, -1).cummax(dim=1).values  # last marker at <= j
    last = torch.cat([last.new_full((batch, 1), -1), last[:, :-1]], dim=1)  # at < j
    opened = marker.gather(1, last.clamp(min=0)) > 0
    return torch.where(last >= 0, opened, in_think.unsqueeze(1))


def think_after(in_think, tokens, valid, think_open: int, think_close: int) -> torch.Tensor:
    """[B] bool: the think state after the emitted `tokens` [B, k] (valid [B, k] bool marks the
    emitted ones), from the state before them (in_think [B])."""
    padded = torch.where(valid, tokens, torch.full_like(tokens, -1))
    end = torch.cat([padded, padded.new_full((padded.shape[0], 1), -1)], dim=1)
    return think_states(in_think, end, think_open, think_close)[:, -1]


def relax_mask(
    offsets: torch.Tensor,  # [B] long: answer tokens emitted before this block
    in_think: torch.Tensor,  # [B] bool: inside <think> at the block's start
    drafts: torch.Tensor,  # [B, m] the drafted ids (sampler space, as the think ids)
    guards: Guards,
    think_open: int | None = None,
    think_close: int | None = None,
) -> torch.Tensor:
    """[B, m] bool: where the rule's law applies (True) or SpS's (False). Drafted position j is
    the answer's token offsets + j: SpS below strict_first; with relax_in = think, SpS outside
    <think>, a drafted </think> making the positions after it SpS (no think ids: SpS)."""
    m = drafts.shape[1]
    position = offsets.unsqueeze(1) + torch.arange(m, device=drafts.device)  # [B, m]
    relax = position >= guards.strict_first
    if guards.relax_in == "think":
        if think_open is None or think_close is None:
            return torch.zeros_like(relax)
        relax = relax & think_states(in_think, drafts, think_open, think_close)
    return relax


# ---- binding to a pair's vocabulary (once per decoder, not per step) ----------------------------
@dataclass(frozen=True)
class ThinkIds:
    """<think> and </think>: vocabulary ids (the prompt's) and sampler-space ids (the drafts')."""

    vocab_open: int
    vocab_close: int
    open: int
    close: int

    def inside_after(self, ids: list[int]) -> bool:
        """Inside <think> after the vocabulary ids `ids`: their last think marker opens (host)."""
        for token in reversed(ids):
            if token in (self.vocab_open, self.vocab_close):
                return token == self.vocab_open
        return False


def _sampler_space(vocab_ids, token_map: torch.Tensor | None) -> list[int]:
    """Sampler-space indices of vocabulary ids (their place in token_map; absent ones dropped)."""
    if token_map is None:
        return [int(i) for i in vocab_ids]
    place = {int(v): k for k, v in enumerate(token_map.tolist())}
    return [place[int(i)] for i in vocab_ids if int(i) in place]


def bind_guards(rule, eos_ids, token_map=None, device="cpu") -> ThinkIds | None:
    """Gives a guarded rule its stop ids in sampler space (`rule.stop_ids`) and returns the think
    ids where relax_in = think: from the pair's stop set when the run set one
    (`rule.vocab_stop_set`: stop_ids, think_open, think_close as tasks/stop_set.py gives them),
    else the engine's EOS ids. One line when relax_in = think finds no think ids."""
    guards = getattr(rule, "guards", NO_GUARDS)
    if guards == NO_GUARDS:
        return None
    stop_set = getattr(rule, "vocab_stop_set", None)
    stop_ids = stop_set.stop_ids if stop_set is not None else sorted(eos_ids)
    if guards.stop_exact and rule.stop_ids is None:
        rule.stop_ids = torch.tensor(_sampler_space(stop_ids, token_map), device=device)
    if guards.relax_in != "think":
        return None
    marks = (None, None) if stop_set is None else (stop_set.think_open, stop_set.think_close)
    mapped = _sampler_space([m for m in marks if m is not None], token_map)
    if None in marks or len(mapped) != 2:
        raise ValueError(
            "relax_in=think needs the pair's <think> and </think> token ids (tasks/stop_set.py: "
            "rule.vocab_stop_set); this pair or caller has none: drop sampler.relax_in"
        )
    return ThinkIds(marks[0], marks[1], mapped[0], mapped[1])
