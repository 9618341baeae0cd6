"""The measurements of the GPU check (scripts/gpu_check.py); each returns a JSON-ready dict with
"passed".

Greedy equality is checked "up to ties": where the speculative (or compiled) decode and the
plain autoregressive one first differ, the verifier's top-2 logit margin after their common
prefix is recorded; a divergence passes only when that margin is within the dtype's tolerance,
i.e. when the two paths' rounding could legitimately flip the argmax.
"""

from __future__ import annotations

import json
import statistics
import time
from functools import partial

import torch

from cactus_bench.bench.decoders import sps_decoder
from cactus_bench.bench.greedy import GREEDY
from cactus_bench.engine import AutoregressiveDecoder, SpeculativeDecoder
from cactus_bench.engine.runtime import crop_cache, make_runner
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.naive import naive_verify
from cactus_bench.tasks.prompt_ids import chat_prompt_ids
from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH

TIE_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.5, "float16": 0.05}  # top-2 logit margins
BENCH_RULES = {"sps": {}, "cactus": {"delta": 1.0}, "cactus_exact": {"delta": 1.0}, "tas": {}}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def demo_prompts(tokenizer, count: int) -> list[list[int]]:
    """The first `count` demo prompts, chat-formatted and tokenised as the task does."""
    lines = DEMO_PROMPTS_PATH.read_text().splitlines()[:count]
    return [chat_prompt_ids(tokenizer, json.loads(line)["prompt"], {}) for line in lines]


@torch.inference_mode()
def top2_margin(model, ids: list[int], device: torch.device) -> float:
    logits = model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].float()
    top = logits.topk(2).values
    return float(top[0] - top[1])


def compare_greedy(reference, candidate, verifier, prompts, new_tokens, dtype: str, device):
    """Greedy outputs of two decoders, prompt by prompt; divergences with their margins."""
    equal, divergences = 0, []
    for index, prompt in enumerate(prompts):
        ref = reference.generate(prompt, new_tokens, seed=0).output_ids
        out = candidate.generate(prompt, new_tokens, seed=0).output_ids
        if ref == out:
            equal += 1
            continue
        at = next((i for i, (a, b) in enumerate(zip(ref, out, strict=False)) if a != b), None)
        at = min(len(ref), len(out)) if at is None else at
        margin = top2_margin(verifier, prompt + ref[:at], device)
        divergences.append({"prompt": index, "position": at, "top2_margin": round(margin, 6)})
    tolerance = TIE_TOLERANCE[dtype]
    return {
        "prompts": len(prompts),
        "new_tokens": new_tokens,
        "identical": equal,
        "divergences": divergences,
        "tie_tolerance": tolerance,
        "passed": all(d["top2_margin"] <= tolerance for d in divergences),
    }


def greedy_equality(pair, prompts, new_tokens: int, m: int, dtype: str, device) -> dict:
    """Speculative (SpS, m drafts) vs autoregressive greedy decoding, no EOS stop."""
    common = {
        "sampling": GREEDY,
        "eos_token_ids": [],
        "device": device,
        "compile": "off",
        "token_map": pair.token_map,
    }
    reference = AutoregressiveDecoder(pair.verifier, pair.tokenizer, **common)
    spec = sps_decoder(pair, m, **common)
    result = compare_greedy(reference, spec, pair.verifier, prompts, new_tokens, dtype, device)
    return {"dtype": dtype, "m": m, **result}


def cuda_graphs(pair, prompts, new_tokens: int, m: int, dtype: str, device, compile="on") -> dict:
    """Whole forwards replayed as CUDA graphs (engine/cuda_graphs.py, the default on CUDA)
    against the eager fast forward: greedy equality of the autoregressive and the speculative
    decoders, the graphs' capture time, and the tokens/s of both paths. `compile="off"`
    (gpu_check.py --dry, a CPU) runs the same comparison with graphs off on both sides."""
    common = {
        "sampling": GREEDY,
        "eos_token_ids": [],
        "device": device,
        "token_map": pair.token_map,
        "compile": "off",
    }
    graphs = "on" if compile == "on" else "off"
    eager = AutoregressiveDecoder(pair.verifier, pair.tokenizer, cuda_graphs="off", **common)
    graphed = AutoregressiveDecoder(pair.verifier, pair.tokenizer, cuda_graphs=graphs, **common)
    spec = sps_decoder(pair, m, cuda_graphs=graphs, **common)
    ar = compare_greedy(eager, graphed, pair.verifier, prompts, new_tokens, dtype, device)
    sp = compare_greedy(eager, spec, pair.verifier, prompts, new_tokens, dtype, device)
    capture_s = graphed.graph_capture_s + spec.graph_capture_s
    times = decode_tokens_per_s({"eager": eager, "cuda_graphs": graphed}, prompts, new_tokens)
    return {
        "dtype": dtype,
        "m": m,
        "cuda_graphs": graphs,
        "capture_s": round(capture_s, 2),
        "autoregressive": ar,
        "speculative": sp,
        "greedy_tokens_per_s": times,
        "passed": ar["passed"] and sp["passed"],
    }


def decode_tokens_per_s(decoders: dict, prompts, new_tokens: int) -> dict:
    """Greedy tokens/s of each decoder over the prompts, arms interleaved prompt by prompt."""
    tokens = dict.fromkeys(decoders, 0)
    seconds = dict.fromkeys(decoders, 0.0)
    for index, prompt in enumerate(prompts):
        order = list(decoders) if index % 2 == 0 else list(decoders)[::-1]
        for name in order:
            record = decoders[name].generate(prompt, new_tokens, seed=index)
            tokens[name] += record.num_generated
            seconds[name] += record.total_time_s
    return {name: round(tokens[name] / seconds[name], 1) for name in decoders}


@torch.inference_mode()
def verify_cost(pair, prompt: list[int], max_tokens: int, repeats: int, device) -> dict:
    """Verifier forward time over n = 1..max_tokens new tokens (the (m+1)-token verify of a
    step with m drafts) on the eager fast forward, after a prefill of `prompt`; median of
    `repeats`, the cache cropped back after every forward."""
    sizes = tuple(range(1, max_tokens + 1))
    runner = make_runner(pair.verifier, device, fast="auto", compiled=False, sizes=sizes)
    cache = runner.prefilled_cache(prompt[:-1], capacity=len(prompt) + max_tokens + 8)
    base = len(prompt) - 1
    milliseconds = {}
    for n in sizes:
        ids = torch.tensor([prompt[-1:] * n], device=device)
        samples = []
        for _ in range(repeats + 2):  # two warm-up forwards per size
            synchronize(device)
            start = time.perf_counter()
            runner.forward(ids, cache, all_logits=True)
            synchronize(device)
            samples.append(time.perf_counter() - start)
            crop_cache(cache, base)
        milliseconds[n] = statistics.median(samples[2:]) * 1e3
    one = milliseconds[1]
    return {
        "forward": type(runner).__name__,
        "ms_by_new_tokens": {n: round(ms, 3) for n, ms in milliseconds.items()},
        "cost_vs_one_token": {n: round(ms / one, 3) for n, ms in milliseconds.items()},
        "verifier_decode_tokens_per_s": round(1e3 / one, 1),
        "passed": True,
    }


@torch.inference_mode()
def sampler_bench(device, vocab: int, batches, m: int, repeats: int) -> dict:
    """Fast `verify` of each rule against the naive materialising path at vocabulary `vocab`."""
    rows = []
    for batch in batches:
        generator = torch.Generator(device=device).manual_seed(0)
        p = torch.softmax(4 * torch.randn(batch, m, vocab, device=device, generator=generator), -1)
        q = torch.softmax(
            4 * torch.randn(batch, m + 1, vocab, device=device, generator=generator), -1
        )
        ids = torch.multinomial(p.reshape(-1, vocab), 1, generator=generator).reshape(batch, m)
        for name, params in BENCH_RULES.items():
            rule = make_sampler(name, **params)
            timings = {}
            for impl, verify in (
                ("fast", rule.verify),
                ("naive", partial(naive_verify, rule)),
            ):
                samples = []
                for _ in range(repeats + 1):
                    synchronize(device)
                    start = time.perf_counter()
                    verify(ids, p, q, generator=torch.Generator(device=device).manual_seed(1))
                    synchronize(device)
                    samples.append(time.perf_counter() - start)
                timings[impl] = statistics.median(samples[1:]) * 1e3
            rows.append(
                {
                    "rule": name,
                    "B": batch,
                    "m": m,
                    "V": vocab,
                    "fast_ms": round(timings["fast"], 3),
                    "naive_ms": round(timings["naive"], 3),
                    "speedup_vs_naive": round(timings["naive"] / timings["fast"], 2),
                }
            )
    return {"rows": rows, "repeats": repeats, "passed": True}


def speedup(pair, prompts, new_tokens: int, draft_lengths, device) -> dict:
    """The pair's Cactus (delta = 1) speedup over the verifier alone for each m, at the paper's
    sampling (T 0.6, top-p 0.95, top-k 20), both arms on the eager fast forward, interleaved."""
    common = {
        "sampling": PAPER_SAMPLING,
        "device": device,
        "compile": "off",
        "token_map": pair.token_map,
    }
    baseline = AutoregressiveDecoder(pair.verifier, pair.tokenizer, **common)
    rows = []
    for m in draft_lengths:
        spec = SpeculativeDecoder(
            pair.drafter,
            pair.verifier,
            pair.tokenizer,
            make_sampler("cactus", delta=1.0),
            num_draft_tokens=m,
            **common,
        )
        tps = decode_tokens_per_s({"spec": spec, "verifier": baseline}, prompts, new_tokens)
        records = [spec.generate(p, new_tokens, seed=i) for i, p in enumerate(prompts[:2])]
        accepted = sum(sum(r.accepted_per_step) for r in records)
        steps = sum(r.num_steps for r in records)
        rows.append(
            {
                "m": m,
                "tokens_per_s_spec": tps["spec"],
                "tokens_per_s_verifier": tps["verifier"],
                "speedup": round(tps["spec"] / tps["verifier"], 3),
                "al": round(accepted / max(steps, 1), 3),
            }
        )
    return {"rule": "cactus delta=1.0", "rows": rows, "passed": True}
