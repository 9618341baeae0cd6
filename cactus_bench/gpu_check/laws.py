"""The GPU check's checks on random models: the Qwen3 architecture at its real vocabulary, and
the sampled first-token law of sps and cactus on the device (cactus_bench.models.tiny's pair).

- qwen3_vocab: a random Qwen3-architecture pair at V = 151,936 (Qwen3's own vocabulary, so the
  logits, the softmax and the sampler run at the paper's width) in fp32, bf16 and fp16: greedy
  speculative decoding equals greedy autoregressive decoding, up to near-ties (measurements.py).
- first_token_law: N seeded requests that stop after their first emitted token (every id is an
  EOS, m = 1), on the device; the counts against the rule's exact law `output_distribution(p, q)`
  (chi-square, expected counts >= 5, the rest pooled; p-value floor 1e-3 as the CPU tests), and,
  for cactus (lossy here), against q, which must be rejected so the check can fail.
"""

from __future__ import annotations

import torch
from scipy.stats import chi2

from cactus_bench.bench.greedy import GREEDY
from cactus_bench.engine import SamplingParams, SpeculativeDecoder
from cactus_bench.engine.sampling import process_logits
from cactus_bench.gpu_check.measurements import compare_greedy
from cactus_bench.samplers import make_sampler

QWEN3_VOCAB = 151_936
P_VALUE_FLOOR = 1e-3
LAW_SAMPLING = SamplingParams(temperature=1.0, top_k=6)  # a small support: a strong test
PROMPT = [41]


NO_CPU_BF16 = "this CPU has no bf16 matmul path (AVX512-BF16 / AMX); bf16 runs on the GPU"


def dtype_runs(device, dtype: str) -> bool:
    """False only for bf16 on a CPU whose oneDNN has no bf16 path (--dry on such a machine)."""
    if device.type != "cpu" or dtype != "bfloat16":
        return True
    return bool(
        torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def tiny_pair_on(device, dtype: str, vocab_size: int | None = None):
    from cactus_bench.models.tiny import make_tiny_pair  # lazy: pulls in torch

    drafter, verifier, tokenizer = make_tiny_pair(seed=0, vocab_size=vocab_size)
    torch_dtype = getattr(torch, dtype)
    return drafter.to(device, torch_dtype), verifier.to(device, torch_dtype), tokenizer


def qwen3_vocab(device, dtypes, prompts: int, new_tokens: int, m: int) -> dict:
    """Greedy speculative == greedy autoregressive on a random Qwen3 pair at V = 151,936."""
    from cactus_bench.engine import AutoregressiveDecoder  # lazy: pulls in torch

    results, passed = {}, True
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (prompts, 12), generator=generator).tolist()  # byte tokens
    for dtype in dtypes:
        if not dtype_runs(device, dtype):
            results[dtype] = {"status": "skipped", "skipped": NO_CPU_BF16, "passed": False}
            continue
        drafter, verifier, tokenizer = tiny_pair_on(device, dtype, QWEN3_VOCAB)
        common = {"sampling": GREEDY, "eos_token_ids": [], "device": device, "compile": "off"}
        reference = AutoregressiveDecoder(verifier, tokenizer, **common)
        spec = SpeculativeDecoder(
            drafter, verifier, tokenizer, make_sampler("sps"), num_draft_tokens=m, **common
        )
        result = compare_greedy(reference, spec, verifier, ids, new_tokens, dtype, device)
        results[dtype] = {"vocab": verifier.config.vocab_size, **result}
        passed = passed and result["passed"]
    ran = [dtype for dtype, result in results.items() if "skipped" not in result]
    parts = [dtype for dtype in results if dtype not in ran]
    return {"m": m, "by_dtype": results, "skipped_parts": parts, "passed": passed and bool(ran)}


def chi_square_p(counts: torch.Tensor, law: torch.Tensor) -> tuple[float, int]:
    """(p-value, degrees of freedom): bins expected >= 5, the rest pooled; 0 off the support."""
    n = counts.sum()
    expected = law.double() * n
    if bool((counts[law <= 0] > 0).any()):
        return 0.0, 0
    big = expected >= 5
    observed = torch.cat([counts[big], counts[~big].sum().view(1)])
    expected = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = expected > 0
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    df = int(keep.sum()) - 1
    return float(chi2.sf(stat, df)) if df > 0 else 1.0, df


def first_token_law(device, requests: int) -> dict:
    """The first emitted token of sps and cactus (delta = 1) on the device vs the exact law."""
    drafter, verifier, tokenizer = tiny_pair_on(device, "float32")
    context = torch.tensor([PROMPT], device=device)
    with torch.no_grad():
        p = process_logits(drafter(context).logits[0, -1].float(), LAW_SAMPLING).cpu()
        q = process_logits(verifier(context).logits[0, -1].float(), LAW_SAMPLING).cpu()
    rows, passed = {}, True
    for name, params in (("sps", {}), ("cactus", {"delta": 1.0})):
        rule = make_sampler(name, **params)
        decoder = SpeculativeDecoder(
            drafter,
            verifier,
            tokenizer,
            rule,
            num_draft_tokens=1,
            sampling=LAW_SAMPLING,
            eos_token_ids=range(verifier.config.vocab_size),
            device=device,
            compile="off",
        )
        counts = torch.zeros(q.numel(), dtype=torch.float64)
        for seed in range(requests):
            counts[decoder.generate(PROMPT, max_new_tokens=2, seed=seed).output_ids[0]] += 1
        law = rule.output_distribution(p.double(), q.double())
        p_law, df = chi_square_p(counts, law)
        row = {"requests": requests, "p_value_vs_rule_law": round(p_law, 6), "df": df}
        ok = p_law > P_VALUE_FLOOR
        if name == "cactus":  # lossy at these p, q: the verifier's own law must be rejected
            p_q, _ = chi_square_p(counts, q.double())
            row["p_value_vs_q"] = round(p_q, 6)
            ok = ok and p_q < P_VALUE_FLOOR
        rows[name] = {**row, "passed": ok}
        passed = passed and ok
    return {"rules": rows, "p_value_floor": P_VALUE_FLOOR, "passed": passed}
