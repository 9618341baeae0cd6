"""The training loop both drafter trainers run: budgeted in CPU minutes, resumable, with a curve.

The budget is process time, not wall time, so a run on a shared machine trains as long as it
would alone. AdamW's learning rate warms up linearly, then follows a cosine over the budget
(`learning_rate`). ``state`` (step, epoch, position inside the epoch, CPU and wall seconds) is
part of every checkpoint, so a resumed run sees the batches an uninterrupted one would. Every
``ckpt_minutes`` of CPU, and when the budget is spent, the trainer's ``evaluate`` measures the
model (at step 0 too) and its ``checkpoint`` saves it; what is measured, kept and written is
the trainer's (training/train.py; the removed feature-drafter pilot's too).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm import tqdm

from training.distill import make_batches
from training.shards import TrainingRecords


def learning_rate(s, step: int, frac: float) -> float:
    """Linear warmup over ``s.warmup_steps``, then cosine from ``s.lr`` down to lr / 10 over the
    budget (frac in [0, 1])."""
    warm = min(1.0, (step + 1) / s.warmup_steps)
    return s.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def start_or_resume(
    model, params, s, ckpt: dict | None, key: str, curve_path: Path, header: str, **extra
) -> tuple[torch.optim.AdamW, dict]:
    """The optimizer of ``params`` (AdamW, no weight decay) and the loop state: without a
    checkpoint a fresh state (``extra``: the trainer's own entries) and a curve file holding only
    ``header``; with one, its state, optimizer and model weights (``ckpt[key]``: the trained
    ones, so not strict) restored."""
    optimizer = torch.optim.AdamW(params, lr=s.lr, weight_decay=0.0, betas=(0.9, 0.98))
    if ckpt is None:
        curve_path.write_text(header)
        return optimizer, {"step": 0, "epoch": 0, "offset": 0, "cpu_s": 0.0, "wall_s": 0.0, **extra}
    model.load_state_dict(ckpt[key], strict=False)
    optimizer.load_state_dict(ckpt["optimizer"])
    return optimizer, ckpt["state"]


def budget_loop(
    model: torch.nn.Module,
    params: list[torch.nn.Parameter],
    optimizer: torch.optim.Optimizer,
    state: dict,
    s,
    data: TrainingRecords,
    batch_loss: Callable[[list[int]], torch.Tensor],
    evaluate: Callable[[dict, float], object],
    checkpoint: Callable[[dict, object], None],
    ema_weight: float,
    log,
) -> None:
    """Train ``params`` of ``model`` on ``data.train`` until ``s.train_minutes`` CPU minutes are
    spent in total.

    ``s`` carries lr, warmup_steps, train_minutes, ckpt_minutes, batch_tokens and seed (epoch e
    shuffles its batches with seed + e). ``batch_loss(indices)`` is the loss of the batch of
    ``data.train[indices]`` with the model in train mode. ``evaluate(state, loss)`` gets the
    loss's moving average (weight ``ema_weight`` on the newest batch; NaN before the first step)
    and returns what ``checkpoint(state, result)`` needs. The model is left in eval mode."""
    log(
        f"train: {len(data.train)} seqs / {data.tokens} target tokens, {len(data.held_out)} held "
        f"out; {sum(p.numel() for p in params)} trainable weights; step {state['step']}, "
        f"{state['cpu_s'] / 60:.1f} cpu min done"
    )
    budget = s.train_minutes * 60
    ema = math.nan
    if state["step"] == 0:
        evaluate(state, ema)  # the untrained point of the curve
    last_val = state["cpu_s"]
    progress = tqdm(total=int(budget), initial=int(min(state["cpu_s"], budget)), desc="cpu s")
    while state["cpu_s"] < budget:
        if state["offset"] == 0 and data.refresh():
            # A collection running beside the trainer wrote more shards: train on them too.
            log(f"epoch {state['epoch']}: {len(data.train)} seqs / {data.tokens} target tokens")
        batches = make_batches(data.train, s.batch_tokens, s.seed + state["epoch"])
        state["epoch_batches"] = len(batches)
        for indices in batches[state["offset"] :]:
            cpu, wall = time.process_time(), time.time()
            lr = learning_rate(s, state["step"], state["cpu_s"] / budget)
            for group in optimizer.param_groups:
                group["lr"] = lr
            model.train()
            loss = batch_loss(indices)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            model.eval()
            value = loss.item()
            ema = value if math.isnan(ema) else (1 - ema_weight) * ema + ema_weight * value
            state["step"] += 1
            state["offset"] += 1
            state["cpu_s"] += time.process_time() - cpu
            state["wall_s"] += time.time() - wall
            progress.update(int(state["cpu_s"]) - progress.n)
            done = state["cpu_s"] >= budget
            if done or state["cpu_s"] - last_val > s.ckpt_minutes * 60:
                checkpoint(state, evaluate(state, ema))
                last_val = state["cpu_s"]
            if done:
                break
        else:
            state["epoch"] += 1
            state["offset"] = 0
    progress.close()


def append_curve_row(curve_path: Path, state: dict, *values) -> None:
    """One row of a curve CSV: step, epoch, CPU and wall minutes, then the trainer's ``values``."""
    row = [
        state["step"],
        state["epoch"],
        f"{state['cpu_s'] / 60:.2f}",
        f"{state['wall_s'] / 60:.2f}",
        *values,
    ]
    with open(curve_path, "a") as fh:
        fh.write(",".join(map(str, row)) + "\n")
