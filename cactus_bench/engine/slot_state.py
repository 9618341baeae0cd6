"""What a batched run keeps per slot on the device, so a decode step builds nothing from host data.

Why: on CUDA every tensor built from a Python list (`torch.tensor(list, device=...)`, `t[i] = 3`,
a copy from a CPU tensor) is a blocking copy from pageable memory, a stall of the stream. A step
needs each row's seed, sequence length, token budget, sampling group and the ids each model has
still to read; they live here in [S] (S slots) buffers, written when a request takes a slot (one
copy, outside any step) and advanced by the step itself from its emitted tokens, on the device.
The host keeps its own copies (`Row`) for the scheduler: both follow the same rule
(batch_steps.py `_advance`), so they agree without a read.

Per slot s:
- keys [S] int64: the request's key, from its seed (draws.request_keys: its draws' key);
- seq_len [S] int64: prompt + emitted tokens, L at the start of a step;
- budget [S] int64: tokens the request may still emit (`OutputTracker.remaining`); 0 for an
  empty slot, so a slot is active iff budget > 0;
- greedy [S] bool, group [S] int64: the request's sampling settings (their index in the run's
  `groups`, for `process_logits` per group);
- drafter_ids [S, 2], drafter_count [S]: the ids the drafter has still to read (1 or 2 after a
  step: the last accepted draft's successor, or the last draft and the bonus), vocabulary ids;
- verifier_id [S]: the one id the verifier has still to read (the last emitted token);
- prompt_len [S] int64, in_think [S] bool: the guards' state (samplers/guards.py): an answer's
  tokens so far are seq_len - prompt_len, and whether the row is inside <think> at the step's
  start (from the prompt at `start`, then followed on the device from each step's tokens).
A bonus step (no draft: one token left) leaves the drafter's ids as they were: its row ends.
"""

from __future__ import annotations

import torch

from cactus_bench.engine.draws import LAST, keyed_uniforms, request_keys, step_uniforms
from cactus_bench.samplers.guards import think_after


class SlotState:
    """The per-slot device buffers of one batched run (module docstring)."""

    def __init__(self, slots: int, device):
        self.device = device
        zeros = torch.zeros(slots, dtype=torch.long, device=device)
        self.keys, self.seq_len, self.budget, self.group = (zeros.clone() for _ in range(4))
        self.prompt_len = zeros.clone()
        self.greedy = torch.zeros(slots, dtype=torch.bool, device=device)
        self.in_think = torch.zeros(slots, dtype=torch.bool, device=device)
        self.drafter_ids = torch.zeros((slots, 2), dtype=torch.long, device=device)
        self.drafter_count = zeros.clone()
        self.verifier_id = zeros.clone()
        self.groups: dict = {}  # SamplingParams -> its index in `group`

    def reset(self) -> None:
        """Every slot empty, in place (captured graphs keep reading these buffers; the groups'
        indices stay, as captured laws compare against them)."""
        self.budget.zero_()

    def start(self, slot, seed, params, prompt_len, budget, last, inside_think=False):
        """A request takes `slot`: one copy of its values (outside any step). inside_think:
        the prompt leaves the row inside <think> (guards.ThinkIds.inside_after)."""
        group = self.groups.setdefault(params, len(self.groups))
        flags = [int(params.is_greedy), int(inside_think)]
        values = [seed, prompt_len, budget, group, *flags, last, 1, last]
        row = torch.tensor(values, dtype=torch.long, device=self.device)
        self.keys[slot] = request_keys(row[:1])[0]
        self.seq_len[slot], self.budget[slot], self.group[slot] = row[1:4]
        self.prompt_len[slot] = row[1]
        self.greedy[slot], self.in_think[slot] = row[4].bool(), row[5].bool()
        self.drafter_ids[slot, 0], self.drafter_count[slot], self.verifier_id[slot] = row[6:]

    def stop(self, slot: int) -> None:
        """The slot's request ended (EOS, stop string or budget): the slot turns inactive."""
        self.budget[slot] = 0

    def view(self, first: int, stop: int) -> SlotView:
        return SlotView(self, first, stop)


class SlotView:
    """Slots first..stop-1 of a `SlotState`: views [S'] (no copy), the span a step runs on."""

    def __init__(self, state: SlotState, first: int, stop: int):
        window = slice(first, stop)
        self.keys, self.seq_len = state.keys[window], state.seq_len[window]
        self.budget, self.group = state.budget[window], state.group[window]
        self.greedy = state.greedy[window]
        self.drafter_ids, self.drafter_count = (
            state.drafter_ids[window],
            state.drafter_count[window],
        )
        self.verifier_id = state.verifier_id[window]
        self.prompt_len, self.in_think = state.prompt_len[window], state.in_think[window]
        self.groups = state.groups

    @property
    def active(self) -> torch.Tensor:
        return self.budget > 0  # [S'] bool

    @property
    def answer_offsets(self) -> torch.Tensor:
        """[S'] int64: each row's answer tokens emitted before this step (the guards' offset)."""
        return self.seq_len - self.prompt_len

    def drafts(self, m: int) -> torch.Tensor:
        """[S'] m_b = min(m, remaining - 1): drafts each row makes (0 for an empty slot)."""
        return (self.budget - 1).clamp(0, m)

    def uniforms(self, m: int) -> torch.Tensor:
        """[S', 2m + 1] float64: the step's draws in one call (draws.step_uniforms)."""
        return step_uniforms(self.keys, self.seq_len, m)

    def last_uniforms(self) -> torch.Tensor:
        """[S'] float64: the LAST draw at L (a verifier-only step's one draw)."""
        return keyed_uniforms(self.keys, self.seq_len, LAST)

    def advance_one(self, tokens: torch.Tensor, to_vocab) -> None:
        """After a verifier-only step that emitted tokens [S'] (-1 in an empty slot): the
        verifier reads the token next, the length and budget move by one. Its cache already
        holds L positions (the forward fed the pending token), so nothing rolls back."""
        emitted = tokens >= 0
        self.verifier_id.copy_(
            torch.where(emitted, to_vocab(tokens.clamp(min=0)), self.verifier_id)
        )
        self.seq_len.add_(emitted)
        self.budget.sub_(emitted.long())

    def advance(self, emitted, drafts, to_vocab, caches: dict, think: tuple = ()):
        """After a step that emitted `emitted` [S', m + 1] (sampler indices, -1 past each row's
        tokens) with drafts [S'] m_b: the ids each model reads next, the lengths, the budget, and
        each cache rolled back to its row's accepted prefix (speculative.py's docstring: the
        verifier holds L + accepted positions, the drafter L + kept; a bonus step leaves the
        drafter untouched); think (the sampler-space <think>, </think> ids, or none): the
        rows' think state after their tokens. All on the device."""
        valid = emitted >= 0  # [S', m + 1]
        if think:
            self.in_think.copy_(think_after(self.in_think, emitted, valid, *think))
        emitted_count = valid.sum(-1)  # [S'] a + 1; 0 for an empty slot
        accepted = (emitted_count - 1).clamp(min=0)  # [S'] a
        some = emitted_count > 0
        last = to_vocab(emitted.gather(1, accepted[:, None]).squeeze(1).clamp(min=0))
        self.verifier_id.copy_(torch.where(some, last, self.verifier_id))
        drafted = some & (drafts > 0)
        kept = torch.minimum(accepted, drafts - 1).clamp(min=0)  # [S'] drafts kept in the drafter
        width = emitted.shape[1]
        columns = (kept[:, None] + torch.arange(2, device=emitted.device)).clamp(max=width - 1)
        pending = to_vocab(emitted.gather(1, columns).clamp(min=0))  # [S', 2]
        self.drafter_ids.copy_(torch.where(drafted[:, None], pending, self.drafter_ids))
        count = emitted_count - kept  # 1, or 2 when every draft was accepted
        self.drafter_count.copy_(torch.where(drafted, count, self.drafter_count))
        verifier = caches["verifier"].lengths
        verifier.copy_(torch.where(some, self.seq_len + accepted, verifier))
        if "drafter" in caches:
            drafter = caches["drafter"].lengths
            drafter.copy_(torch.where(drafted, self.seq_len + kept, drafter))
        self.seq_len.add_(emitted_count)
        self.budget.sub_(emitted_count)
