"""Distil the verifier's cached processed laws into the feature head, resumably, in CPU minutes.

Per position the loss is forward KL(q || p_T) over the head's subset (q the verifier's processed
law, p_T the head's softmax at the sampling temperature: dense gradients early) plus
1 - sum_x min(p(x), q(x)) with p the head's processed law (the acceptance itself, what is
measured), as for the distilled drafter (drafter_training.distill). The loop is the distilled
drafter's (drafter_training.loop: AdamW, warmup and a cosine schedule over the CPU-time budget,
resumable inside an epoch). Every ``ckpt_minutes`` the acceptance on held-out *training-split*
prompts (every ``val_every``-th prompt) is appended to ``curve.csv`` and a checkpoint is written;
each epoch first loads shards a collection running beside it wrote meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from cactus_bench.drafter_training.distill import (
    make_batches,
    padded_batch,
    subset_lookup,
)
from cactus_bench.drafter_training.loop import append_curve_row, budget_loop, start_or_resume
from cactus_bench.drafter_training.shards import TrainingRecords, save_whole
from cactus_bench.engine.sampling import PAPER_SAMPLING, SamplingParams, process_logits
from cactus_bench.feature_drafter.head import FeatureHead

CURVE_HEADER = "step,epoch,cpu_min,wall_min,train_tokens,loss,val_acceptance\n"


@dataclass(frozen=True)
class HeadSettings:
    train_minutes: float = 40.0  # CPU minutes (process time) of training
    lr: float = 1e-3
    warmup_steps: int = 20
    batch_tokens: int = 4096  # padded head positions per batch (prompt context included)
    val_every: int = 50
    ckpt_minutes: float = 4.0
    init_layer: int = -1  # the verifier layer the head's decoder layer starts from
    seed: int = 0


def head_batch(records: list[dict], indices: list[int], lookup: torch.Tensor) -> dict:
    """Right-padded head inputs and the N answer positions' targets.

    Head position i reads (s_{i+1}, f_i) and predicts s_{i+2}; answer token t's law q_t was
    computed at sequence position P - 1 + t, so head position P - 2 + t predicts it.
    """
    seqs = [records[i] for i in indices]
    starts, counts = [r["prompt_len"] - 2 for r in seqs], [len(r["q_idx"]) for r in seqs]
    batch = padded_batch([r["ids"][1:] for r in seqs], starts, counts)  # i reads s_{i+1}
    features = torch.zeros(
        (*batch["ids"].shape, seqs[0]["features"].shape[-1]), dtype=torch.float32
    )
    for b, r in enumerate(seqs):
        if r["features"].shape[0] != len(r["ids"]) - 1 or r["prompt_len"] < 2:
            raise ValueError("a record needs features for positions 0..S-2 and a prompt of >= 2")
        features[b, : len(r["features"])] = r["features"].float()
    q_idx = torch.cat([r["q_idx"].long() for r in seqs])  # [N, k]
    batch["features"] = features
    batch["q_idx"] = q_idx
    batch["q_prob"] = torch.cat([r["q_prob"].float() for r in seqs])  # [N, k]
    batch["q_sub"] = lookup[q_idx]  # [N, k] position in the head's subset, -1 outside
    return batch


def head_logits(head: FeatureHead, batch: dict) -> torch.Tensor:
    """[N, K] subset logits at the batch's answer positions."""
    hidden = head.hidden(batch["ids"], batch["features"], batch["mask"])
    return head.lm_head.subset_logits(hidden[batch["rows"], batch["cols"]])


def acceptance_terms(student: torch.Tensor, batch: dict, sampling: SamplingParams):
    """[N] sum_x min(p(x), q(x)) with p the head's processed law over its subset."""
    sub = batch["q_sub"]
    p_at = process_logits(student, sampling).gather(1, sub.clamp(min=0)) * (sub >= 0)
    return torch.minimum(batch["q_prob"], p_at).sum(-1)


def head_loss(student: torch.Tensor, batch: dict, sampling: SamplingParams) -> torch.Tensor:
    """KL(q || p_T) over the subset (q renormalised inside it) + 1 - acceptance, averaged."""
    inside = batch["q_sub"] >= 0
    q = batch["q_prob"] * inside
    q = q / q.sum(-1, keepdim=True).clamp_min(1e-12)
    log_p = torch.log_softmax(student / sampling.temperature, dim=-1)  # [N, K]
    log_p_at = log_p.gather(-1, batch["q_sub"].clamp(min=0))  # [N, k]
    kl = (q * (torch.log(q.clamp_min(1e-12)) - log_p_at)).sum(-1).mean()
    return kl + 1.0 - acceptance_terms(student, batch, sampling).mean()


@torch.no_grad()
def val_acceptance(head, records, lookup, sampling=PAPER_SAMPLING, scale: float = 1.0) -> float:
    """Mean acceptance over every answer position of ``records`` (logits times ``scale``)."""
    total, count = 0.0, 0
    for indices in make_batches(records, 8192, 0):
        batch = head_batch(records, indices, lookup)
        terms = acceptance_terms(head_logits(head, batch) * scale, batch, sampling)
        total, count = total + float(terms.sum()), count + terms.numel()
    return total / max(count, 1)


def train_head(verifier, token_ids, run_dir: Path, s: HeadSettings, log) -> FeatureHead:
    """Train (or resume) the head on ``run_dir/train`` shards; returns the trained head."""
    ckpt_path, curve_path = run_dir / "head.pt", run_dir / "curve.csv"
    ckpt = torch.load(ckpt_path) if ckpt_path.exists() else None
    # A resumed run sees the shards it had (its epoch's batches were planned on them).
    data = TrainingRecords(
        run_dir / "train", s.val_every, "q_idx", ckpt["state"]["shards"] if ckpt else None
    )
    if not (data.train or data.held_out):
        raise RuntimeError(f"no shards under {run_dir / 'train'}; run the collect phase first")
    lookup = subset_lookup(token_ids, verifier.config.vocab_size)
    torch.manual_seed(s.seed)
    head = FeatureHead(verifier, token_ids, s.init_layer)
    params = head.trainable_parameters()
    optimizer, state = start_or_resume(
        head, params, s, ckpt, "head", curve_path, CURVE_HEADER, shards=data.totals["names"]
    )

    def batch_loss(indices: list[int]) -> torch.Tensor:
        batch = head_batch(data.train, indices, lookup)
        return head_loss(head_logits(head, batch), batch, PAPER_SAMPLING)

    def evaluate(state: dict, loss: float) -> None:
        point(head, data.held_out, lookup, state, loss, data.tokens, curve_path, log)

    def checkpoint(state: dict, _) -> None:
        state["shards"] = data.totals["names"]  # what a resumed run must load again
        trained = {k: v for k, v in head.state_dict().items() if "embed_tokens" not in k}
        ckpt = {
            "head": trained,
            "optimizer": optimizer.state_dict(),
            "state": state,
            "token_ids": token_ids,
        }
        save_whole(ckpt, ckpt_path)

    budget_loop(
        head, params, optimizer, state, s, data, batch_loss, evaluate, checkpoint, 0.05, log
    )
    log(f"train done: {state['step']} steps, {state['cpu_s'] / 60:.1f} cpu min")
    return head


def point(head, val, lookup, state, loss, tokens, curve_path: Path, log) -> None:
    """Append one held-out (training-split) acceptance point to the curve and the log."""
    acc = val_acceptance(head, val, lookup)
    append_curve_row(curve_path, state, tokens, f"{loss:.4f}", f"{acc:.4f}")
    log(
        f"step {state['step']} epoch {state['epoch']} cpu {state['cpu_s'] / 60:.1f} min "
        f"loss {loss:.4f} val acceptance {acc:.4f}"
    )
