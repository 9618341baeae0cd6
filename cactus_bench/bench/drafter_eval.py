"""Measures of the SmolLM2 drafter (eval_drafter.py): per-token acceptance, step costs, the
cost model's speedup and end-to-end speculative speed.

- Acceptance: on verifier-sampled answers to held-out prompts (GSM8K *test* questions and
  IFEval prompts, never used in training), both models teacher-forced; per token the sps
  acceptance sum_x min(p, q) = 1 - TV(p, q) of the processed (temperature, top-k, top-p)
  distributions (Leviathan et al.'s alpha per token).
- Cost: median time of one cached decode step (batch 1) of the drafter and the verifier, and of
  a verifier forward over m + 1 tokens, interleaved.
- Cost model: speedup = E[tokens per step] / (m * c_draft + c_verify(m + 1)) with
  E = (1 - a^(m+1)) / (1 - a) for i.i.d. per-token acceptance a (Leviathan et al., 2023).
- End to end: SpeculativeDecoder(sps, m) against AutoregressiveDecoder on the same prompts.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import AutoTokenizer, DynamicCache, LlamaForCausalLM

from cactus_bench.bench.decoders import sps_decoder
from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, process_logits
from cactus_bench.models import LoadedPair
from cactus_bench.models.drafter import load_drafter
from cactus_bench.models.smollm2 import prepare_smollm2
from training.teacher import chat_ids

CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def held_out_prompts(data_dir: Path, per_source: int) -> dict[str, list[str]]:
    """The first ``per_source`` GSM8K test questions and IFEval prompts (evaluation only)."""
    sources = {
        "gsm8k_test": data_dir / "gsm8k" / "test.jsonl",
        "ifeval": data_dir / "ifeval" / "input_data.jsonl",
    }
    prompts = {}
    for name, path in sources.items():
        if not path.exists():
            raise FileNotFoundError(f"{path} not found; pass --data-dir with gsm8k/ and ifeval/")
        key = "question" if name == "gsm8k_test" else "prompt"
        with open(path) as fh:
            prompts[name] = [
                json.loads(line)[key] for _, line in zip(range(per_source), fh, strict=False)
            ]
    return prompts


@torch.no_grad()
def acceptance_on(
    pair, prompts: list[str], sampling: SamplingParams, max_new_tokens: int
) -> list[list[float]]:
    """Per-token 1 - TV(p, q) along verifier-sampled answers to ``prompts``: one list per answer
    (tokens of one answer are correlated, so the interval resamples answers)."""
    tok = pair.tokenizer
    encoded = [chat_ids(tok, p) for p in prompts]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), width), tok.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, e in enumerate(encoded):  # left padding for batched generation
        ids[row, width - len(e) :] = torch.tensor(e)
        mask[row, width - len(e) :] = 1
    out = pair.verifier.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        max_new_tokens=max_new_tokens,
        pad_token_id=tok.pad_token_id,
    )
    per_answer: list[list[float]] = []
    for row, e in enumerate(tqdm(encoded, desc="teacher-forced p, q", leave=False)):
        answer = out[row, width:].tolist()
        if tok.eos_token_id in answer:
            answer = answer[: answer.index(tok.eos_token_id) + 1]
        seq = torch.tensor([e + answer])
        # Position len(e) - 1 + t predicts answer token t.
        sl = slice(len(e) - 1, len(e) - 1 + len(answer))
        p = process_logits(pair.verifier(input_ids=seq).logits[0, sl], sampling)  # [G, V]
        q = process_logits(pair.drafter(input_ids=seq).logits[0, sl], sampling)
        per_answer.append(torch.minimum(p, q).sum(-1).tolist())
    return per_answer


@torch.no_grad()
def step_time(model, prompt: list[int], new_tokens: int, clock: str = "wall") -> float:
    """Seconds of one cached forward over ``new_tokens`` tokens after ``prompt``: wall time, or
    this thread's CPU time ("cpu": on a shared machine, time slices lost to other processes
    do not count; 1 thread only)."""
    cache = DynamicCache()
    model(input_ids=torch.tensor([prompt]), cache=cache, use_cache=True, logits_to_keep=1)
    feed = torch.tensor([prompt[-new_tokens:]])
    start = CLOCKS[clock]()
    model(input_ids=feed, cache=cache, use_cache=True, logits_to_keep=new_tokens)
    return CLOCKS[clock]() - start


def measure_costs(
    pair, prompt: list[int], max_m: int, repeats: int, clock: str = "wall"
) -> dict[str, float]:
    """Median step times, measured interleaved so that load from other processes on a shared
    machine hits drafter and verifier alike: keys draft_1 and verify_n for n = 1..max_m + 1,
    and the spread of the paired per-repeat ratio draft_1 / verify_1 (quartiles, 10%-90%)."""
    samples: dict[str, list[float]] = {"draft_1": []}
    samples.update({f"verify_{n}": [] for n in range(1, max_m + 2)})
    for _ in tqdm(range(repeats), desc="step costs", leave=False):
        samples["draft_1"].append(step_time(pair.drafter, prompt, 1, clock))
        for n in range(1, max_m + 2):
            samples[f"verify_{n}"].append(step_time(pair.verifier, prompt, n, clock))
    times = {key: statistics.median(values) for key, values in samples.items()}
    ratios = [d / v for d, v in zip(samples["draft_1"], samples["verify_1"], strict=True)]
    deciles = statistics.quantiles(ratios, n=10)
    quartiles = statistics.quantiles(ratios, n=4)
    times["ratio_spread"] = {
        "median": statistics.median(ratios),
        "q25": quartiles[0],
        "q75": quartiles[2],
        "p10": deciles[0],
        "p90": deciles[-1],
    }
    return times


def cost_model_speedup(a: float, m: int, c_draft: float, c_verify: float) -> float:
    expected = m + 1 if a >= 1 else (1 - a ** (m + 1)) / (1 - a)
    return expected / (m * c_draft + c_verify)


def cost_report(times: dict, alpha: float, max_m: int) -> dict:
    """`measure_costs`' times as costs relative to one verifier step, and the speedup the cost
    model predicts for m = 1..max_m at per-token acceptance ``alpha``."""
    verify_1, draft_1 = times["verify_1"], times["draft_1"]
    c_draft = draft_1 / verify_1
    # Verifying m drafts is one cached forward over m + 1 tokens; its cost relative to one token.
    c_verify = {m: times[f"verify_{m + 1}"] / verify_1 for m in range(1, max_m + 1)}
    return {
        "verifier_step_s": verify_1,
        "drafter_step_s": draft_1,
        "drafter_over_verifier": c_draft,
        "drafter_over_verifier_per_repeat": times["ratio_spread"],
        "verify_m_plus_1_over_1": c_verify,
        "cost_model_speedup": {
            m: cost_model_speedup(alpha, m, c_draft, c) for m, c in c_verify.items()
        },
    }


def end_to_end(pair, prompts: list[str], sampling: SamplingParams, m: int, new_tokens: int) -> dict:
    base = AutoregressiveDecoder(pair.verifier, pair.tokenizer, sampling=sampling)
    spec = sps_decoder(pair, m, sampling=sampling)
    totals = {
        "base_tokens": 0,
        "base_s": 0.0,
        "spec_tokens": 0,
        "spec_s": 0.0,
        "drafted": 0,
        "accepted": 0,
        "steps": 0,
    }
    for i, prompt in enumerate(tqdm(prompts, desc="end to end", leave=False)):
        ids = chat_ids(pair.tokenizer, prompt)
        b = base.generate(ids, max_new_tokens=new_tokens, seed=i)
        s = spec.generate(ids, max_new_tokens=new_tokens, seed=i)
        totals["base_tokens"] += b.num_generated
        totals["base_s"] += b.total_time_s
        totals["spec_tokens"] += s.num_generated
        totals["spec_s"] += s.total_time_s
        totals["drafted"] += sum(s.drafted_per_step)
        totals["accepted"] += sum(s.accepted_per_step)
        totals["steps"] += s.num_steps
    base_tps = totals["base_tokens"] / totals["base_s"]
    spec_tps = totals["spec_tokens"] / totals["spec_s"]
    return {
        "m": m,
        "prompts": len(prompts),
        # Drafts after the first rejection count as drafted and not accepted, so this is
        # (a + ... + a^m) / m for per-token acceptance a, not a itself.
        "accepted_over_drafted": totals["accepted"] / max(totals["drafted"], 1),
        "accepted_length": totals["accepted"] / max(totals["steps"], 1),
        "tokens_per_step": totals["spec_tokens"] / max(totals["steps"], 1),
        "verifier_tokens_per_s": base_tps,
        "speculative_tokens_per_s": spec_tps,
        "speedup": spec_tps / base_tps,
    }


def load_smollm2_pair(weights: Path, config: Path, dtype: str = "float32") -> LoadedPair:
    """The smollm2_135m pair with the drafter weights at ``weights`` (default: committed), both
    models in ``dtype``."""
    model_dir = prepare_smollm2()
    torch_dtype = getattr(torch, dtype)
    verifier = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype).eval()
    drafter = load_drafter(verifier, weights, config)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return LoadedPair(drafter, verifier, tokenizer, str(weights), str(model_dir))
