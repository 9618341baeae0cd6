"""Distil the verifier's cached processed laws into the feature head, resumably, in CPU minutes.

Per position the loss is forward KL(q || p_T) over the head's subset (q the verifier's processed
law, p_T the head's softmax at the sampling temperature: dense gradients early) plus
1 - sum_x min(p(x), q(x)) with p the head's processed law (the acceptance itself, what is
measured), as for the distilled drafter (drafter_training.distill). AdamW with warmup and a cosine
schedule over the CPU-time budget (drafter_training.train.learning_rate). Every
``ckpt_minutes`` the acceptance on held-out *training-split* prompts (every ``val_every``-th
prompt) is appended to ``curve.csv`` and a checkpoint is written; each epoch first loads shards a
collection running beside it wrote meanwhile.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from cactus_bench.drafter_training.distill import (
    make_batches,
    split_records,
    subset_lookup,
)
from cactus_bench.drafter_training.train import learning_rate
from cactus_bench.engine.sampling import SamplingParams, process_logits
from cactus_bench.feature_drafter.collect import PAPER_SAMPLING, load_records, shard_names
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
    width = max(len(r["ids"]) - 1 for r in seqs)
    hidden = seqs[0]["features"].shape[-1]
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    features = torch.zeros((len(seqs), width, hidden), dtype=torch.float32)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    rows, cols = [], []
    for b, r in enumerate(seqs):
        n = len(r["ids"]) - 1
        if r["features"].shape[0] != n or r["prompt_len"] < 2:
            raise ValueError("a record needs features for positions 0..S-2 and a prompt of >= 2")
        ids[b, :n] = r["ids"][1:].long()
        features[b, :n] = r["features"].float()
        mask[b, :n] = 1
        g = len(r["q_idx"])
        rows.append(torch.full((g,), b, dtype=torch.long))
        cols.append(torch.arange(r["prompt_len"] - 2, r["prompt_len"] - 2 + g))
    q_idx = torch.cat([r["q_idx"].long() for r in seqs])  # [N, k]
    return {
        "ids": ids,
        "features": features,
        "mask": mask,
        "rows": torch.cat(rows),
        "cols": torch.cat(cols),
        "q_idx": q_idx,
        "q_prob": torch.cat([r["q_prob"].float() for r in seqs]),  # [N, k]
        "q_sub": lookup[q_idx],  # [N, k] position in the head's subset, -1 outside
    }


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
    data_dir, ckpt_path, curve_path = run_dir / "train", run_dir / "head.pt", run_dir / "curve.csv"
    ckpt = torch.load(ckpt_path) if ckpt_path.exists() else None
    # A resumed run sees the shards it had (its epoch's batches were planned on them).
    records, totals = load_records(data_dir, ckpt["state"]["shards"] if ckpt else None)
    if not records:
        raise RuntimeError(f"no shards under {data_dir}; run the collect phase first")
    train, val = split_records(records, s.val_every)
    lookup = subset_lookup(token_ids, verifier.config.vocab_size)
    torch.manual_seed(s.seed)
    head = FeatureHead(verifier, token_ids, s.init_layer)
    params = head.trainable_parameters()
    optimizer = torch.optim.AdamW(params, lr=s.lr, weight_decay=0.0, betas=(0.9, 0.98))
    state = {"step": 0, "epoch": 0, "offset": 0, "cpu_s": 0.0, "wall_s": 0.0}
    state["shards"] = totals["names"]
    if ckpt is not None:
        head.load_state_dict(ckpt["head"], strict=False)
        optimizer.load_state_dict(ckpt["optimizer"])
        state = ckpt["state"]
    else:
        curve_path.write_text(CURVE_HEADER)
    budget, ema, last_val = s.train_minutes * 60, math.nan, state["cpu_s"]
    tokens = sum(len(r["q_idx"]) for r in train)
    log(
        f"train: {len(train)} seqs / {tokens} answer tokens, {len(val)} val seqs; "
        f"{head_size(params)} trainable weights; {state['cpu_s'] / 60:.1f} cpu min done"
    )
    if state["step"] == 0:
        point(head, val, lookup, state, ema, tokens, curve_path, log)
    while state["cpu_s"] < budget:
        if state["offset"] == 0 and shard_names(data_dir) != state["shards"]:
            records, totals = load_records(data_dir)  # a collection beside us wrote more
            train, val = split_records(records, s.val_every)
            tokens, state["shards"] = sum(len(r["q_idx"]) for r in train), totals["names"]
            log(f"epoch {state['epoch']}: {len(train)} seqs / {tokens} answer tokens")
        batches = make_batches(train, s.batch_tokens, s.seed + state["epoch"])
        for indices in batches[state["offset"] :]:
            cpu, wall = time.process_time(), time.time()
            lr = learning_rate(s, state["step"], state["cpu_s"] / budget)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = head_batch(train, indices, lookup)
            head.train()
            loss = head_loss(head_logits(head, batch), batch, PAPER_SAMPLING)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            head.eval()
            ema = loss.item() if math.isnan(ema) else 0.95 * ema + 0.05 * loss.item()
            state["step"] += 1
            state["offset"] += 1
            state["cpu_s"] += time.process_time() - cpu
            state["wall_s"] += time.time() - wall
            done = state["cpu_s"] >= budget
            if done or state["cpu_s"] - last_val > s.ckpt_minutes * 60:
                point(head, val, lookup, state, ema, tokens, curve_path, log)
                trained = {k: v for k, v in head.state_dict().items() if "embed_tokens" not in k}
                ckpt = {
                    "head": trained,
                    "optimizer": optimizer.state_dict(),
                    "state": state,
                    "token_ids": token_ids,
                }
                torch.save(ckpt, ckpt_path.with_suffix(".tmp"))
                ckpt_path.with_suffix(".tmp").rename(ckpt_path)
                last_val = state["cpu_s"]
            if done:
                break
        else:
            state["epoch"] += 1
            state["offset"] = 0
    log(f"train done: {state['step']} steps, {state['cpu_s'] / 60:.1f} cpu min")
    return head


def head_size(params) -> int:
    return sum(p.numel() for p in params)


def point(head, val, lookup, state, loss, tokens, curve_path: Path, log) -> None:
    """Append one held-out (training-split) acceptance point to the curve and the log."""
    acc = val_acceptance(head, val, lookup)
    row = [
        state["step"],
        state["epoch"],
        f"{state['cpu_s'] / 60:.2f}",
        f"{state['wall_s'] / 60:.2f}",
        tokens,
        f"{loss:.4f}",
        f"{acc:.4f}",
    ]
    with open(curve_path, "a") as fh:
        fh.write(",".join(map(str, row)) + "\n")
    log(
        f"step {state['step']} epoch {state['epoch']} cpu {state['cpu_s'] / 60:.1f} min "
        f"loss {loss:.4f} val acceptance {acc:.4f}"
    )
