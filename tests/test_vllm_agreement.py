"""Cross-backend agreement on the embedded pair: vLLM's CPU build vs this project's HF engine.

Both backends run `model=smollm2_135m` itself (SmolLM2-135M-Instruct verifier; the drafter with
its 8192-id head: the HF engine's module, and in vLLM the export cactus_bench/vllm/export.py
registers as its own architecture, the same law), fp32, T 0.6,
top-p 0.95, top-k 20, m = 2, on the same prompt token ids (the demo prompts, chat template) and
seeds. Both run in subprocesses (tests/agreement_worker.py): one vLLM engine for the three rules,
one after another (the first as a run starts it, the others swapped into its worker), bound to
one core, VLLM_BATCH requests at a time; the HF engine's three rules in parallel, one torch
thread each, eight requests at a time. Batching changes no law in either
engine (a request's seed drives its own draws), only the bits of batched matmuls; it makes the
vLLM side, the test's critical path, cheaper: the law samples 4.7x and decoding 2x faster at 32
requests than at one (2026-12-05, 2-core Xeon), the workers 868 s in all under a load of 4
against 1,273 s at one request on a quiet machine.

1. Acceptance by position agrees for sps, cactus (delta = 1) and tas: per position j, the pooled
   rate a_j / n_j (steps accepting >= j+1 drafts over steps drafting >= j+1) of each backend,
   two-proportion z test, |z| < 3. Power: a true difference D shifts z by about
   D / sqrt(2 p (1 - p) / n), so a difference of D = 0.05 reaches the limit |z| = 3 (fails it
   half the time, D = 0.065 with probability 0.8) once
       n >= 2 p (1 - p) 3^2 / 0.05^2 = 7,200 p (1 - p)
   steps per backend: 1,800 at p = 0.5, 1,512 at p = 0.3. The test computes this bound from each
   position's pooled rate and asserts that both backends drafted that much; 20 prompts x 6 seeds
   x 32 tokens give ~2,000 steps per rule and backend. (With drafter v1's export 5 seeds gave
   ~2,000; drafter v2's accepts more, ~0.5 at position 1 for cactus and tas, so a request takes
   fewer steps while the bound rises to 1,800: 5 seeds gave 1,658-1,699 and failed the check.
   Power 0.8 at D = 0.05 would need 2,951 steps at p = 0.5: ~1.5x the HF engine's time here, on
   a shared 2-core CPU.)
2. vLLM + sps emits the verifier's law: the second token of many seeded requests of one prompt
   (the first is sampled by vLLM's ordinary sampler at prefill, the second is the rule's first
   output) is compared, per first-token group, with the verifier's processed law computed by
   transformers: chi-square, bins with expected count >= 5 (the rest pooled), significance 1e-4.
   The same counts against the drafter's law must be rejected (the test can fail).

Slow (~15 min on a 2-core CPU under a load of 4, less when quiet): `make test-vllm` runs it inside
.venv-vllm; skipped cleanly without vLLM or without the SmolLM2 cache.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from vllm_worker_job import worker_core

pytest.importorskip("vllm", reason="needs vLLM: make setup-vllm, then make test-vllm")
pytestmark = [pytest.mark.slow, pytest.mark.vllm]

HERE = Path(__file__).resolve().parent
RULES = {"sps": {}, "cactus": {"delta": 1.0}, "tas": {}}
SAMPLING = {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
# CACTUS_BENCH_AGREEMENT_SCALE < 1 shrinks the workload for a smoke run (the power check fails)
SCALE = float(os.environ.get("CACTUS_BENCH_AGREEMENT_SCALE", "1"))
M, MAX_TOKENS, SEEDS_PER_PROMPT = 2, 32, max(1, round(6 * SCALE))
LAW_PROMPT, LAW_SAMPLES = "The capital of France is", max(100, round(3000 * SCALE))
# The HF engine runs with the project's transformers (>= 5.20; .venv-vllm has vLLM's 5.19, under
# which the engine's KV-cache crop tests fail): CACTUS_BENCH_HF_PYTHON, else ../.venv's python.
HF_PYTHON = os.environ.get("CACTUS_BENCH_HF_PYTHON") or str(HERE.parent / ".venv/bin/python")
VLLM_BATCH = 32  # vLLM's max_num_seqs for the agreement engines (1 is the runner's default)
Z_LIMIT, DIFFERENCE = 3.0, 0.05  # a difference of 0.05 puts E|z| at the limit


def required_steps(rate: float) -> int:
    return math.ceil(2 * rate * (1 - rate) * Z_LIMIT**2 / DIFFERENCE**2)


def two_proportion_z(a1: int, n1: int, a2: int, n2: int) -> float:
    pooled = (a1 + a2) / (n1 + n2)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return 0.0 if spread == 0 else (a1 / n1 - a2 / n2) / spread


# ---- the two backends, in subprocesses -----------------------------------------------------------
def _job(backend: str, rule: str | None, paths: dict, prompts, seeds, law_prompt) -> dict:
    """One HF rule's counts, or (rule None) {rule: counts} of the one vLLM engine."""
    job = {
        **paths,
        "backend": backend,
        "m": M,
        "sampling": SAMPLING,
        "prompts": prompts,
        "seeds": seeds,
        "max_tokens": MAX_TOKENS,
    }
    if rule is None:  # test 2 reads the law of sps's engine
        job.update(rules=RULES, batch=VLLM_BATCH, law_rule="sps", law_prompt=law_prompt)
        job["law_samples"] = LAW_SAMPLES
    else:
        job.update(rule=rule, params=RULES[rule])
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": str(worker_core()),
        "PYTHONPATH": str(HERE.parent),
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",  # the rule swap is a function sent to the worker
    }
    python = HF_PYTHON if backend == "hf" and Path(HF_PYTHON).exists() else sys.executable
    clock = time.perf_counter()
    done = subprocess.run(
        [python, str(HERE / "agreement_worker.py")],
        input=json.dumps(job),
        stdout=subprocess.PIPE,
        stderr=None if backend == "hf" else subprocess.PIPE,  # HF progress shows with -s
        text=True,
        env=env,
        timeout=7200,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        errors = [line for line in done.stdout.splitlines() if "Error" in line or "error" in line]
        raise RuntimeError(
            f"{backend} worker ({rule or 'every rule'}) failed: {errors[-20:]} "
            f"{(done.stderr or '')[-3000:]}"
        )
    result = json.loads(lines[-1].removeprefix("RESULT "))
    seconds = result["seconds"] if rule else next(iter(result.values()))["seconds"]
    seconds["wall"] = time.perf_counter() - clock  # the worker's phases, plus exit
    return result


def _print_phases(pending: dict, started: float) -> None:
    """Wall seconds per worker phase (shown with -rP), so the test's cost can be followed."""
    print(f"agreement workers: {time.perf_counter() - started:.0f} s wall in all")
    for (backend, rule), job in pending.items():
        if job.exception() is None:
            result = job.result()
            seconds = result["seconds"] if rule else next(iter(result.values()))["seconds"]
            phases = ", ".join(f"{k} {v:.0f}" for k, v in seconds.items())
            print(f"  {backend} {rule or 'every rule'}: {phases} s")


@pytest.fixture(scope="module")
def runs():
    from cactus_bench.models import load_pair
    from cactus_bench.models.registry import get_pair_spec
    from cactus_bench.models.smollm2 import is_prepared, smollm2_dir
    from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH
    from cactus_bench.vllm.export import export_vllm_drafter

    if not is_prepared():
        pytest.skip("needs the SmolLM2 cache (make setup)")
    paths = {"verifier": str(smollm2_dir()), "drafter": str(export_vllm_drafter())}
    pair = load_pair(get_pair_spec("smollm2_135m"), device="cpu", dtype="float32")
    texts = [json.loads(line)["prompt"] for line in DEMO_PROMPTS_PATH.read_text().splitlines()]
    rendered = [
        pair.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        for text in texts
    ]
    prompt_ids = [pair.tokenizer.encode(text, add_special_tokens=False) for text in rendered]
    prompts = [ids for ids in prompt_ids for _ in range(SEEDS_PER_PROMPT)]
    seeds = list(range(len(prompts)))
    law_prompt = pair.tokenizer.encode(LAW_PROMPT)
    jobs = [("vllm", None), *(("hf", rule) for rule in RULES)]
    # the HF rules decode in parallel beside the one vLLM engine (one core, ~3.5 GB)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        pending = {
            (backend, rule): pool.submit(_job, backend, rule, paths, prompts, seeds, law_prompt)
            for backend, rule in jobs
        }
        for job in pending.values():  # a failed job fails only the tests that read it
            job.exception()
    _print_phases(pending, started)
    return {"jobs": pending, "pair": pair, "law_prompt": law_prompt}


def _result(runs, backend: str, rule: str) -> dict:
    if backend == "vllm":
        return runs["jobs"]["vllm", None].result()[rule]
    return runs["jobs"][backend, rule].result()


# ---- 1. acceptance by position -------------------------------------------------------------------
@pytest.mark.parametrize("rule", list(RULES))
def test_acceptance_by_position_agrees(runs, rule):
    hf, vllm = _result(runs, "hf", rule), _result(runs, "vllm", rule)
    for j in range(M):
        a1, n1 = hf["accepted"][j], hf["drafted"][j]
        a2, n2 = vllm["accepted"][j], vllm["drafted"][j]
        rate = (a1 + a2) / (n1 + n2)
        need = required_steps(rate)
        z = two_proportion_z(a1, n1, a2, n2)
        print(f"{rule} pos {j + 1}: hf {a1}/{n1} = {a1 / n1:.4f}, vllm {a2}/{n2} = {a2 / n2:.4f}")
        assert min(n1, n2) >= need, f"{rule} position {j + 1}: {n1}/{n2} steps, need {need}"
        assert abs(z) < Z_LIMIT, f"{rule} position {j + 1}: hf {a1}/{n1} vs vllm {a2}/{n2}, z={z}"


# ---- 2. vLLM + sps emits the verifier's law ------------------------------------------------------
def _chi_square(counts: torch.Tensor, law: torch.Tensor) -> tuple[float, int]:
    """(statistic, degrees of freedom): bins with expected >= 5, the remaining mass pooled."""
    expected = law.double() * counts.sum()
    big = expected >= 5
    observed = torch.cat([counts[big], counts[~big].sum().view(1)])
    expected = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = expected > 0
    if bool((observed[~keep] > 0).any()):
        return math.inf, int(keep.sum()) - 1  # tokens the law cannot emit
    observed, expected = observed[keep], expected[keep]
    return float(((observed - expected) ** 2 / expected).sum()), int(keep.sum()) - 1


def test_vllm_sps_emits_the_verifier_law(runs):
    from scipy.stats import chi2

    from cactus_bench.engine.sampling import SamplingParams, process_logits

    pair, prompt = runs["pair"], runs["law_prompt"]
    pairs = torch.tensor(_result(runs, "vllm", "sps")["pairs"])  # [N, 2]
    params = SamplingParams(**SAMPLING)
    against = {"verifier": [0.0, 0], "drafter": [0.0, 0]}
    for first in pairs[:, 0].unique():
        seconds = pairs[pairs[:, 0] == first, 1]
        if seconds.numel() < 100:
            continue
        context = torch.tensor([prompt + [int(first)]])
        counts = torch.bincount(seconds, minlength=pair.verifier.config.vocab_size).double()
        for name, model in (("verifier", pair.verifier), ("drafter", pair.drafter)):
            with torch.no_grad():
                law = process_logits(model(context).logits[0, -1].float(), params)
            stat, df = _chi_square(counts, law)
            against[name][0] += stat
            against[name][1] += df
    stat, df = against["verifier"]
    assert df > 0, "no first token was common enough; pick another LAW_PROMPT"
    assert stat < chi2.isf(1e-4, df), f"chi-square {stat:.1f} on {df} df against the verifier"
    stat, df = against["drafter"]
    assert stat > chi2.isf(1e-4, max(df, 1)), "the drafter's law fits too: the test has no power"
