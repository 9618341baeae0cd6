"""Measure the SmolLM2 drafter: per-token acceptance, draft cost, end-to-end speculative speed.

1. Acceptance. The verifier answers held-out prompts (GSM8K *test* questions and IFEval prompts,
   never used in training) at the demo settings; on those answers both models are run teacher-
   forced and the per-token sps acceptance sum_x min(p, q) = 1 - TV(p, q) of the processed
   (temperature, top-k, top-p) distributions is averaged (Leviathan et al.'s alpha per token),
   with a 95% interval from a bootstrap over answers.
2. Cost. Median wall time of one cached decode step (batch 1) of the drafter and the verifier,
   and of a verifier forward over m + 1 tokens, on this machine, with --threads threads.
3. End to end. SpeculativeDecoder(sps, m) against AutoregressiveDecoder on a few prompts:
   measured acceptance, tokens per step, tokens/s and the speedup, next to the cost model
   speedup = E[tokens per step] / (m * c_draft + c_verify(m + 1)) with
   E = (1 - a^(m+1)) / (1 - a) for i.i.d. per-token acceptance a (Leviathan et al., 2023).

Usage: python scripts/eval_drafter.py [--weights W --config C] [--out results/bench/x.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache

from cactus_bench.bench.sampling import PAPER_SAMPLING
from cactus_bench.drafter_training.teacher import chat_ids
from cactus_bench.engine import (
    AutoregressiveDecoder,
    SamplingParams,
    SpeculativeDecoder,
    process_logits,
)
from cactus_bench.models import LoadedPair
from cactus_bench.models.drafter import (
    SMOLLM2_DRAFTER_CONFIG,
    SMOLLM2_DRAFTER_WEIGHTS,
    load_drafter,
)
from cactus_bench.models.smollm2 import prepare_smollm2
from cactus_bench.results.intervals import (
    per_token_summary,
)
from cactus_bench.results.metadata import device_name
from cactus_bench.samplers import make_sampler

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data"


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
def acceptance_on(pair, prompts: list[str], sampling: SamplingParams, args) -> list[list[float]]:
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
        max_new_tokens=args.max_new_tokens,
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


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


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


def end_to_end(pair, prompts: list[str], sampling: SamplingParams, args) -> dict:
    base = AutoregressiveDecoder(pair.verifier, pair.tokenizer, sampling=sampling)
    spec = SpeculativeDecoder(
        pair.drafter,
        pair.verifier,
        pair.tokenizer,
        make_sampler("sps"),
        num_draft_tokens=args.m,
        sampling=sampling,
    )
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
        b = base.generate(ids, max_new_tokens=args.e2e_tokens, seed=i)
        s = spec.generate(ids, max_new_tokens=args.e2e_tokens, seed=i)
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
        "m": args.m,
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
    from transformers import AutoTokenizer, LlamaForCausalLM

    model_dir = prepare_smollm2()
    torch_dtype = getattr(torch, dtype)
    verifier = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype).eval()
    drafter = load_drafter(verifier, weights, config)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    return LoadedPair(drafter, verifier, tokenizer, str(weights), str(model_dir))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", type=Path, default=SMOLLM2_DRAFTER_WEIGHTS)
    parser.add_argument("--config", type=Path, default=SMOLLM2_DRAFTER_CONFIG)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--per-source", type=int, default=12, help="held-out prompts per source")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--m", type=int, default=3, help="draft length for end to end and cost")
    parser.add_argument("--max-m", type=int, default=4, help="cost model for m = 1..max_m")
    parser.add_argument("--e2e-prompts", type=int, default=3)
    parser.add_argument("--e2e-tokens", type=int, default=96)
    parser.add_argument("--cost-repeats", type=int, default=21)
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="both models in this dtype",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="step costs: wall time, or this thread's CPU time",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sampling = PAPER_SAMPLING
    pair = load_smollm2_pair(args.weights, args.config, args.dtype)
    report: dict = {
        "drafter": json.loads(args.config.read_text()),
        "threads": args.threads,
        "dtype": args.dtype,
        "cpu": device_name("cpu"),
        "clock": args.clock,
        "sampling": sampling.to_dict(),
    }

    prompts = held_out_prompts(args.data_dir, args.per_source)
    report["acceptance"], answers = {}, []
    for source, texts in prompts.items():
        per_answer = acceptance_on(pair, texts, sampling, args)
        answers += per_answer
        report["acceptance"][source] = summary = per_token_summary(per_answer, args.seed)
        print(
            f"acceptance {source}: {summary['mean']:.3f} {summary['ci95']} over "
            f"{summary['tokens']} tokens"
        )
    report["acceptance"]["all"] = per_token_summary(answers, args.seed)
    alpha = report["acceptance"]["all"]["mean"]

    probe = chat_ids(pair.tokenizer, prompts["gsm8k_test"][0])
    times = measure_costs(pair, probe, args.max_m, args.cost_repeats, args.clock)
    verify_1, draft_1 = times["verify_1"], times["draft_1"]
    c_draft = draft_1 / verify_1
    spread = times["ratio_spread"]
    # Verifying m drafts is one cached forward over m + 1 tokens; its cost relative to one token.
    c_verify = {m: times[f"verify_{m + 1}"] / verify_1 for m in range(1, args.max_m + 1)}
    report["cost"] = {
        "verifier_step_s": verify_1,
        "drafter_step_s": draft_1,
        "drafter_over_verifier": c_draft,
        "drafter_over_verifier_per_repeat": spread,
        "verify_m_plus_1_over_1": c_verify,
        "cost_model_speedup": {
            m: cost_model_speedup(alpha, m, c_draft, c) for m, c in c_verify.items()
        },
    }
    print(
        f"cost: drafter step {draft_1 * 1e3:.1f} ms = {c_draft:.3f} of verifier "
        f"{verify_1 * 1e3:.1f} ms (per-repeat ratio quartiles {spread['q25']:.3f}-"
        f"{spread['q75']:.3f}); verify m + 1 tokens over one: {c_verify}"
    )

    if args.e2e_prompts > 0:
        texts = (prompts["gsm8k_test"] + prompts["ifeval"])[:: max(1, args.per_source // 2)]
        report["end_to_end"] = end_to_end(pair, texts[: args.e2e_prompts], sampling, args)
        print(f"end to end: {json.dumps(report['end_to_end'])}")
    print(json.dumps(report, indent=2))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
