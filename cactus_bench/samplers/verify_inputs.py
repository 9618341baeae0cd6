"""What a rule's `verify` reads, checked and gathered: the input checks, one line each, the
per-position statistics (`DraftStats`) a rule decides acceptance from, and the call's inputs
together (`VerifyCall`).

Shapes are checked from the tensors' shapes alone (no host read); values (NaN, empty rows, ids
out of range) with one host sync for all of them, and skipped when the caller passes its own
uniforms with check=False (verify then traces into one graph).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class DraftStats:
    """Per-position quantities a rule may read to decide acceptance ([B, m], float32/64)."""

    q_n: torch.Tensor  # verifier probability of the drafted token (row-normalised)
    p_n: torch.Tensor  # drafter probability of the drafted token (row-normalised)
    target_probs: torch.Tensor  # [B, m + 1, V] the raw verifier rows, for rules needing more
    target_sums: torch.Tensor  # [B, m + 1] row sums of target_probs
    draft_token_ids: torch.Tensor  # [B, m]


UNSCALED_NAMES = ("unscaled_draft_probs", "unscaled_target_probs")


@dataclass(frozen=True)
class VerifyCall:
    """One `verify` call's inputs, checked: what a rule reads to decide (`decide`)."""

    ids: torch.Tensor  # [B, m] int64 drafted tokens
    draft_probs: torch.Tensor  # [B, m, V] as given (not normalised)
    target_probs: torch.Tensor  # [B, m + 1, V] as given; row m is the bonus row
    stats: DraftStats  # q(n), p(n) row-normalised, [B, m]; the target row sums
    draft_sums: torch.Tensor  # [B, m] row sums of draft_probs
    check: bool  # False: no host reads (the caller passed its uniforms; one graph)
    support_width: int | None  # a bound on each row's support, for the plans (kernel.py)
    relax: torch.Tensor | None  # [B, m] bool: True = the rule, False = SpS (the guards)
    unscaled: dict[str, torch.Tensor]  # UNSCALED_NAMES: the temperature-1 laws, when passed


def check_unscaled_names(unscaled: dict) -> None:
    """The keyword laws `verify` takes besides its own: the temperature-1 laws, by name."""
    unknown = sorted(set(unscaled) - set(UNSCALED_NAMES))
    if unknown:
        raise TypeError(f"verify() got unexpected keywords {unknown}; it takes {UNSCALED_NAMES}")


def draft_stats(ids, draft_probs, target_probs, check=True) -> tuple[DraftStats, torch.Tensor]:
    """Gathers q(n), p(n) in the input dtype, then row-normalises in float32 (float64 inputs
    stay float64).

    Row sums accumulate in that dtype without materialising a converted copy of the inputs;
    normalising makes bf16/fp16 or truncated rows that do not sum exactly to 1 behave.
    """
    m = ids.shape[1]
    dtype = torch.float64 if target_probs.dtype == torch.float64 else torch.float32
    target_sums = target_probs.sum(dim=-1, dtype=dtype)  # [B, m + 1]
    draft_sums = draft_probs.sum(dim=-1, dtype=dtype)  # [B, m]
    if check:  # one host sync for all checks (each bool() on a CUDA tensor stalls the stream)
        problems = torch.stack(
            [
                ~torch.isfinite(target_sums).all(),
                (target_sums <= 0).any(),
                ~torch.isfinite(draft_sums).all(),
                (draft_sums <= 0).any(),
                ((ids < 0) | (ids >= target_probs.shape[-1])).any(),
            ]
        )
        if bool(problems.any()):
            _raise_input_error(problems.tolist(), target_probs.shape[-1])
    index = ids.unsqueeze(-1)
    q_n = target_probs[:, :m].gather(-1, index).squeeze(-1).to(dtype) / target_sums[:, :m]
    p_n = draft_probs.gather(-1, index).squeeze(-1).to(dtype) / draft_sums
    stats = DraftStats(
        q_n=q_n.clamp(0.0, 1.0),
        p_n=p_n.clamp(0.0, 1.0),
        target_probs=target_probs,
        target_sums=target_sums,
        draft_token_ids=ids,
    )
    return stats, draft_sums


def _raise_input_error(problems: list[bool], vocab: int) -> None:
    messages = [
        "target_probs contains NaN or inf: fix the logits before sampling",
        "target_probs has a row with no positive mass",
        "draft_probs contains NaN or inf: fix the logits before sampling",
        "draft_probs has a row with no positive mass",
        f"draft_token_ids must lie in [0, {vocab})",
    ]
    raise ValueError(next(msg for msg, bad in zip(messages, problems, strict=True) if bad))


def check_shapes(ids, draft_probs, target_probs, uniforms=None) -> tuple[int, int, int]:
    """(B, m, V) from the shapes alone (no host read)."""
    if ids.dim() != 2:
        raise ValueError(f"draft_token_ids must be [B, m]; got shape {tuple(ids.shape)}")
    batch, m = ids.shape
    if m < 1:
        raise ValueError("draft_token_ids must hold at least one drafted token (m >= 1)")
    if ids.dtype.is_floating_point:
        raise ValueError("draft_token_ids must be an integer tensor")
    if draft_probs.dim() != 3 or tuple(draft_probs.shape[:2]) != (batch, m):
        raise ValueError(
            f"draft_probs must be [B, m, V] = [{batch}, {m}, V]; got {tuple(draft_probs.shape)}"
        )
    if target_probs.dim() != 3 or tuple(target_probs.shape[:2]) != (batch, m + 1):
        raise ValueError(
            f"target_probs must be [B, m + 1, V] = [{batch}, {m + 1}, V]; "
            f"got {tuple(target_probs.shape)}"
        )
    vocab = target_probs.shape[2]
    if draft_probs.shape[2] != vocab:
        raise ValueError(
            f"vocab mismatch: draft_probs has V={draft_probs.shape[2]}, target_probs has "
            f"V={vocab}; restrict both to the shared token ids first"
        )
    if uniforms is not None and (
        tuple(uniforms.shape) != (batch, m + 1) or not uniforms.dtype.is_floating_point
    ):
        raise ValueError(
            f"uniforms must be a float tensor [B, m + 1] = [{batch}, {m + 1}]; "
            f"got {tuple(uniforms.shape)} {uniforms.dtype}"
        )
    return batch, m, vocab
