"""The guards' relax mask for a batched step's rows (`batch_steps.speculative_step`).

strict_first and relax_in = think need, per row, the answer tokens emitted before the block and
whether the row is inside <think> at its start (samplers/guards.py, `relax_mask`). Both are the
row's own host state, known before the step (no value is read back from the device for them);
they travel to the device as one small copy with the step's other per-row inputs, and only when
the rule has such a guard.
"""

from __future__ import annotations

import torch

from cactus_bench.samplers.guards import NO_GUARDS, ThinkIds, relax_mask


def rows_relax(rule, think_ids: ThinkIds | None, rows, drafts: torch.Tensor):
    """[G, m] bool, True where the rule's law applies, for rows [G] with drafts [G, m] (sampler
    space); None when the rule has no per-position guard (the default: nothing is built)."""
    guards = getattr(rule, "guards", NO_GUARDS)
    if not guards.per_position:
        return None
    emitted = [row.tracker.token_ids for row in rows]  # vocabulary ids after the prompt
    offsets = torch.tensor([len(ids) for ids in emitted], device=drafts.device)
    inside = [
        think_ids is not None and think_ids.inside_after(row.request.prompt_ids + ids)
        for row, ids in zip(rows, emitted, strict=True)
    ]
    think = (think_ids.open, think_ids.close) if think_ids is not None else ()
    inside = torch.tensor(inside, dtype=torch.bool, device=drafts.device)
    return relax_mask(offsets, inside, drafts, guards, *think)
