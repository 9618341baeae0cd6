"""make gpu-check: one prepared run of everything that needs a CUDA GPU (under 8 min, one GPU).

    make gpu-check                      # writes results/bench/gpu_check.json, prints a summary
    python scripts/gpu_check.py --budget-s 300 --skip vllm

On the embedded pair (SmolLM2-135M-Instruct and its distilled drafter, `make setup`):
1. greedy_float32 / greedy_bfloat16: speculative (SpS, m = 4) and autoregressive greedy decoding
   emit the same tokens on CUDA, up to argmax ties (gpu_checks.py says how ties are judged);
2. cuda_graphs: the torch.compile + CUDA-graph forward (engine.compile=on, the GPU default for
   models from 20M parameters) compiles, its decodes match the eager forward's, and its speed;
3. sampler_bench: every rule's verify vs the naive path at V = 151,936 on the GPU;
4. verify_cost: verifier decode tokens/s and the cost of an (m+1)-token verify, m = 0..10;
5. speedup: the pair's Cactus speedup over the verifier alone for m = 1..4;
6. vllm: vLLM's greedy tokens against this engine and a self-drafting run with the Cactus rule
   installed, when vLLM is importable (else recorded as skipped).
Each check is timed and guarded: an error is recorded in the JSON (written after every check)
and the run goes on; checks that would start past the time budget are skipped. Exit status 0
when every check that ran passed, 1 otherwise, 2 without a usable GPU (one line naming the fix).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
TORCH_VERSION = "2.13.0"  # the Makefile's TORCH_VERSION
CHECKS = (
    "greedy_float32",
    "greedy_bfloat16",
    "cuda_graphs",
    "sampler_bench",
    "verify_cost",
    "speedup",
    "vllm",
)


def cuda_problem(device: str) -> str | None:
    """None when `device` is usable, else one line naming the fix."""
    import torch

    if not device.startswith("cuda"):
        return None
    if torch.version.cuda is None:
        return (
            f"torch {torch.__version__} is a CPU build (a CPU wheel was installed); install a "
            f"CUDA build into this venv: .venv/bin/pip install --force-reinstall "
            f"torch=={TORCH_VERSION} --index-url https://download.pytorch.org/whl/cu128 "
            "(or the cuXXX index matching your driver, see pytorch.org), then make gpu-check"
        )
    if not torch.cuda.is_available():
        return (
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU: run on a GPU "
            "node, and check nvidia-smi and CUDA_VISIBLE_DEVICES"
        )
    return None


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/gpu_check.json")
    parser.add_argument("--device", default="cuda", help="cuda (cpu only for smoke tests)")
    parser.add_argument("--pair", default="smollm2_135m", help="registered pair to check")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--m", type=int, default=4, help="draft length of the equality checks")
    parser.add_argument("--budget-s", type=float, default=360, help="no check starts after it")
    parser.add_argument("--skip", default="", help=f"comma-separated, of: {', '.join(CHECKS)}")
    return parser.parse_args()


class Context:
    """Loads each dtype's pair once; prompts from the verifier's chat template."""

    def __init__(self, args):
        import torch
        from gpu_checks import demo_prompts

        self.args, self.device = args, torch.device(args.device)
        self._pairs = {}
        self.prompts = demo_prompts(self.pair("float32").tokenizer, args.prompts)

    def pair(self, dtype: str):
        from cactus_bench.models import load_pair

        if dtype not in self._pairs:
            self._pairs[dtype] = load_pair(self.args.pair, device=self.device, dtype=dtype)
        return self._pairs[dtype]


def run_check(name: str, ctx: Context) -> dict:
    import gpu_checks as g

    args, device, prompts = ctx.args, ctx.device, ctx.prompts
    if name.startswith("greedy_"):
        dtype = name.removeprefix("greedy_")
        return g.greedy_equality(ctx.pair(dtype), prompts, args.new_tokens, args.m, dtype, device)
    if name == "cuda_graphs":
        return g.cuda_graphs(
            ctx.pair("bfloat16"), prompts[:4], args.new_tokens, args.m, "bfloat16", device
        )
    if name == "sampler_bench":
        return g.sampler_bench(device, vocab=151_936, batches=(1, 8), m=10, repeats=10)
    if name == "verify_cost":
        return g.verify_cost(
            ctx.pair("bfloat16"), prompts[0], max_tokens=11, repeats=30, device=device
        )
    if name == "speedup":
        return g.speedup(ctx.pair("bfloat16"), prompts, 2 * args.new_tokens, (1, 2, 3, 4), device)
    if name == "vllm":
        from cactus_bench.models.smollm2 import prepare_smollm2

        if args.pair != "smollm2_135m":
            return {"skipped": "the vLLM check runs on the embedded SmolLM2 pair", "passed": True}
        from gpu_check_vllm import vllm_agreement

        return vllm_agreement(
            prepare_smollm2(), ctx.pair("bfloat16"), prompts[:4], args.new_tokens, device
        )
    raise ValueError(f"unknown check {name!r}; known: {', '.join(CHECKS)}")


def environment(device: str) -> dict:
    import torch
    import transformers

    from cactus_bench.results.metadata import device_name, git_state

    sha, dirty = git_state()
    return {
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "git_sha": sha,
        "git_dirty": dirty,
    }


def main() -> int:
    args = parse_args()
    skip = {name for name in args.skip.split(",") if name}
    if skip - set(CHECKS):
        raise SystemExit(f"gpu-check: unknown --skip {sorted(skip - set(CHECKS))}; known: {CHECKS}")
    problem = cuda_problem(args.device)
    if problem:
        print(f"gpu-check: {problem}", file=sys.stderr)
        return 2
    import torch

    torch.set_float32_matmul_precision("highest")  # fp32 equality means fp32 matmuls, not TF32
    torch.backends.cudnn.allow_tf32 = False
    started = time.perf_counter()
    report = {**environment(args.device), "pair": args.pair, "checks": {}}
    ctx = Context(args)
    for name in CHECKS:
        elapsed = time.perf_counter() - started
        if name in skip or elapsed > args.budget_s:
            why = "--skip" if name in skip else f"time budget ({args.budget_s:.0f} s) spent"
            result = {"skipped": why, "passed": True}
        else:
            print(f"gpu-check: {name} ...", flush=True)
            check_start = time.perf_counter()
            try:
                result = run_check(name, ctx)
            except Exception as error:  # recorded; the other checks still run
                lines = traceback.format_exception_only(error)
                result = {"error": lines[-1].strip(), "passed": False}
            result["seconds"] = round(time.perf_counter() - check_start, 1)
        report["checks"][name] = result
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        report["passed"] = all(check["passed"] for check in report["checks"].values())
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"gpu-check: wrote {args.out}")
    return 0 if report["passed"] else 1


def summary(report: dict) -> str:
    lines = [
        f"gpu-check on {report['device']} (torch {report['torch']}, CUDA {report['cuda']}), "
        f"{report['elapsed_s']:.0f} s"
    ]
    for name, check in report["checks"].items():
        status = "skipped" if "skipped" in check else "ok" if check["passed"] else "FAILED"
        detail = check.get("skipped") or check.get("error") or headline(name, check)
        lines.append(f"  {name:<16} {status:<8} {detail}")
    return "\n".join(lines)


def headline(name: str, check: dict) -> str:
    if name.startswith("greedy_"):
        return (
            f"{check['identical']}/{check['prompts']} identical, divergences {check['divergences']}"
        )
    if name == "cuda_graphs":
        return (
            f"compile {check['compile_s']} s; AR {check['autoregressive']['identical']}/"
            f"{check['autoregressive']['prompts']}, spec {check['speculative']['identical']}/"
            f"{check['speculative']['prompts']} identical; tok/s {check['greedy_tokens_per_s']}"
        )
    if name == "sampler_bench":
        return ", ".join(f"{r['rule']} B={r['B']} x{r['speedup_vs_naive']}" for r in check["rows"])
    if name == "verify_cost":
        cost = check["cost_vs_one_token"]
        shown = ", ".join(f"{n}: {cost[n]}x" for n in (2, 5, 11) if n in cost)
        return f"{check['verifier_decode_tokens_per_s']} tok/s; (m+1)-token verify cost {shown}"
    if name == "speedup":
        return ", ".join(f"m={r['m']}: {r['speedup']}x (AL {r['al']})" for r in check["rows"])
    if name == "vllm":
        return (
            f"vLLM {check['vllm_version']}: greedy {check['greedy_vs_engine']['identical']}/"
            f"{check['greedy_vs_engine']['prompts']}, self-draft accept "
            f"{check['self_draft_accept_rate']}"
        )
    return ""


if __name__ == "__main__":
    sys.exit(main())
