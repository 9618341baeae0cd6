"""The pilot's logit-scale calibration, its JSON record and its training-curve plot."""

from __future__ import annotations

import csv
import json
import subprocess
import time
from pathlib import Path

import torch
from matplotlib.figure import Figure

from cactus_bench.drafter_training.distill import CALIBRATION_SCALES, make_batches, subset_lookup
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.feature_drafter.train import acceptance_terms, head_batch, head_logits
from cactus_bench.paper import PAPER
from cactus_bench.results.metadata import device_name

GO_THRESHOLD = 0.62  # position-1 acceptance that makes the full head worth building


@torch.no_grad()
def calibrate(head, val: list[dict], token_ids, vocab: int, scales=CALIBRATION_SCALES):
    """Set the head's logit scale to the one with the best acceptance on ``val`` (held-out
    training-split prompts, as for the distilled drafter); return it and the grid."""
    lookup = subset_lookup(token_ids, vocab)
    totals, count = dict.fromkeys(scales, 0.0), 0
    for indices in make_batches(val, 8192, 0):
        batch = head_batch(val, indices, lookup)
        student = head_logits(head, batch)  # unscaled
        for scale in scales:
            totals[scale] += float(acceptance_terms(student * scale, batch, PAPER_SAMPLING).sum())
        count += student.shape[0]
    grid = {scale: round(total / max(count, 1), 4) for scale, total in totals.items()}
    best = max(scales, key=lambda scale: (grid[scale], -scale))
    head.lm_head.logit_scale = float(best)
    return best, grid


def git_commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True)
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_report(
    args, results, unscaled, scale, grid, costs, collected, state, val_drafter, held_out
) -> None:
    """The JSON record (--out) and the curve plot (--plot)."""
    head_all = results["head"]["all"]["mean"]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": git_commit(),
        "cpu": device_name("cpu"),
        "threads": args.threads,
        "sampling": {
            "temperature": PAPER.temperature,
            "top_k": PAPER.top_k,
            "top_p": PAPER.top_p,
        },
        "head": "EAGLE-1 style: fc([embedding; last hidden state]) -> 1 Llama layer (width 576, "
        "init from verifier layer 29) -> norm -> verifier head rows for the distilled "
        "drafter's 8192 ids + bias",
        "teacher": {
            "answer_tokens": int(collected["tokens"]),
            "shards": len(collected["names"]),
            "cpu_minutes": round(collected["cpu_s"] / 60, 1),
            "wall_minutes": round(collected["wall_s"] / 60, 1),
        },
        "training": {
            "cpu_minutes": round(state["cpu_s"] / 60, 1),
            "steps": state["step"],
            "epochs_started": state["epoch"] + 1,
            "wall_minutes": round(state["wall_s"] / 60, 1),
        },
        "held_out_prompts": {
            "gsm8k_test": sum(r["source"] == "gsm8k_test" for r in held_out),
            "demo": sum(r["source"] == "demo" for r in held_out),
        },
        "head_logit_scale": scale,
        "head_logit_scale_grid_val": {str(k): v for k, v in grid.items()},
        "acceptance_position_1": results,
        "head_unscaled_all": unscaled,
        "drafter_on_train_split_val": val_drafter,
        "step_cost": costs,
        "go_threshold": GO_THRESHOLD,
        "planned": {"train_tokens": args.train_tokens, "train_cpu_minutes": args.train_minutes},
        "decision": decision(head_all, collected["tokens"], state["cpu_s"] / 60, args),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    plot_curve(
        args.run_dir / "curve.csv",
        args.plot,
        val_drafter["mean"],
        results["head"]["all"],
        results["drafter"]["all"],
        report["cpu"],
    )


def decision(acceptance: float, tokens: int, cpu_minutes: float, args) -> str:
    """go at or above the threshold; below it, no-go only when the planned data and training
    budget were (90%) spent: a head trained on less says nothing against the full pilot."""
    if acceptance >= GO_THRESHOLD:
        return "go"
    spent = tokens >= 0.9 * args.train_tokens and cpu_minutes >= 0.9 * args.train_minutes
    return "no-go" if spent else "inconclusive: below the threshold, under the planned budget"


def plot_curve(
    curve_csv: Path,
    out: Path,
    drafter_val: float,
    head_held_out: dict,
    drafter_held_out: dict,
    machine: str,
) -> None:
    """Val acceptance (held-out training-split prompts) against training CPU minutes, and the
    final held-out test acceptance of both drafters ({"mean", "ci95"}: bars are the bootstrap
    interval over answers); `machine` (the CPU that measured it) goes in the title."""
    with open(curve_csv) as fh:
        rows = list(csv.DictReader(fh))
    minutes = [float(r["cpu_min"]) for r in rows]
    fig = Figure(figsize=(6.4, 4.0))  # the object API: no pyplot state, any backend
    ax = fig.subplots()
    ax.plot(
        minutes,
        [float(r["val_acceptance"]) for r in rows],
        "o-",
        label="feature head, val (train-split held-out, logit scale 1)",
    )
    ax.axhline(
        drafter_val, color="gray", ls="--", label=f"distilled drafter, val ({drafter_val:.3f})"
    )
    ax.axhline(GO_THRESHOLD, color="red", ls=":", label=f"go threshold ({GO_THRESHOLD})")
    for result, marker, color, name in (
        (head_held_out, "s", "black", "feature head, held-out test, calibrated"),
        (drafter_held_out, "D", "gray", "distilled drafter, held-out test"),
    ):
        mean, (low, high) = result["mean"], result["ci95"]
        ax.errorbar(
            [minutes[-1]],
            [mean],
            yerr=[[mean - low], [high - mean]],
            fmt=marker,
            color=color,
            capsize=3,
            label=f"{name} ({mean:.3f} [{low:.3f}, {high:.3f}])",
        )
    ax.set_xlabel("training CPU minutes (process time)")
    ax.set_ylabel("position-1 acceptance sum min(p, q)")
    ax.set_title(
        f"Feature-head pilot: SmolLM2-135M, T 0.6, top-k 20, top-p 0.95\n{machine}", fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
