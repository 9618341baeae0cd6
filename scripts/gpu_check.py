"""make gpu-check: everything a first GPU contact needs, under 8 minutes on one GPU.

    make gpu-check                      # writes results/bench/gpu_check.json, prints a summary
    make gpu-check DRY=1                # every check's CPU part, small (CI runs it)
    python scripts/gpu_check.py --budget-s 300 --skip vllm

On the embedded pair (SmolLM2-135M-Instruct and its distilled drafter, `make setup`):
1. greedy_float32 / _bfloat16 / _float16: speculative (SpS, m = 4) and autoregressive greedy
   decoding emit the same tokens on CUDA, up to near-ties (gpu_checks.py says how ties are judged;
   divergences are counted);
2. cuda_graphs: the compiled forward (torch.compile + CUDA graphs) decodes as the eager one;
3. qwen3_vocab: the same equality on a random Qwen3-architecture pair at V = 151,936, each dtype;
4. first_token_law: sps's and cactus's first emitted token on the device against the exact law
   (chi-square; cactus must also reject q, so the check can fail);
5. sampler_bench: every rule's verify vs the naive path at V = 151,936;
6. verify_cost / 7. speedup: verifier step costs, the pair's Cactus speedup for m = 1..4;
8. vllm: in .venv-vllm (scripts/gpu_check_vllm.py): V2 refused in one line and the engine started
   on runner V1 with the rule; vLLM's greedy speculative tokens equal the HF engine's greedy
   tokens (near-ties allowed); self-drafting accepted >= 0.9; vLLM's own rejection sampler and
   this project's sps at V = 151,936 both emit q (chi-square), and their time ratio.
Each check is timed and guarded: an error is recorded in the JSON (written after every check)
and the run goes on; checks that would start past the time budget are skipped. Exit status 0
when every check that ran passed, 1 otherwise (loudly: the failed checks are listed), 2 without
a usable GPU (one line naming the fix). `--dry` runs on the CPU with the tiny random pair and
small sizes: the script and every check's logic, not the GPU.
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
    "greedy_float16",
    "cuda_graphs",
    "qwen3_vocab",
    "first_token_law",
    "sampler_bench",
    "verify_cost",
    "speedup",
    "vllm",
)
VLLM_PYTHON = REPO / ".venv-vllm/bin/python"
DRY = {"device": "cpu", "pair": "tiny_random", "prompts": 2, "new_tokens": 6, "budget_s": 1800}


def cuda_problem(device: str) -> str | None:
    """None when `device` is usable, else one line naming the fix."""
    import torch

    if not device.startswith("cuda"):
        return None
    if torch.version.cuda is None:
        return (
            f"torch {torch.__version__} is a CPU build; on the GPU node run make setup-gpu "
            "(PyPI's CUDA 13 build, driver >= 580), or for an older driver .venv/bin/pip install "
            f"--force-reinstall torch=={TORCH_VERSION} --index-url "
            "https://download.pytorch.org/whl/cu126 (docs/gpu.md), then make gpu-check"
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
    parser.add_argument("--dry", action="store_true", help="CPU, tiny pair, small sizes (CI)")
    parser.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    args = parser.parse_args()
    if args.dry:
        for key, value in DRY.items():
            setattr(args, key, value)
    return args


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
    from gpu_checks_laws import NO_CPU_BF16, dtype_runs

    args, device, prompts = ctx.args, ctx.device, ctx.prompts
    low = "bfloat16" if dtype_runs(device, "bfloat16") else "float32"  # --dry on such a CPU
    if name.startswith("greedy_"):
        dtype = name.removeprefix("greedy_")
        if not dtype_runs(device, dtype):
            return {"skipped": NO_CPU_BF16, "passed": True}
        return g.greedy_equality(ctx.pair(dtype), prompts, args.new_tokens, args.m, dtype, device)
    if name == "qwen3_vocab":
        from gpu_checks_laws import qwen3_vocab

        dtypes = ("float32", "bfloat16", "float16")
        return qwen3_vocab(device, dtypes, len(prompts), args.new_tokens, args.m)
    if name == "first_token_law":
        from gpu_checks_laws import first_token_law

        return first_token_law(device, requests=300 if args.dry else 2000)
    if name == "cuda_graphs":
        compile = "off" if args.dry else "on"
        pair = ctx.pair(low)
        return g.cuda_graphs(pair, prompts[:4], args.new_tokens, args.m, low, device, compile)
    if name == "sampler_bench":
        batches, repeats = ((1,), 1) if args.dry else ((1, 8), 10)
        return g.sampler_bench(device, vocab=151_936, batches=batches, m=10, repeats=repeats)
    if name == "verify_cost":
        repeats = 3 if args.dry else 30
        return g.verify_cost(
            ctx.pair(low), prompts[0], max_tokens=11, repeats=repeats, device=device
        )
    if name == "speedup":
        return g.speedup(ctx.pair(low), prompts, 2 * args.new_tokens, (1, 2, 3, 4), device)
    if name == "vllm":
        from gpu_checks_vllm import vllm_check

        return vllm_check(args, device)
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

    if args.dry:  # tiny models on a shared CPU: one thread is ~10-50x faster than two fighting
        torch.set_num_threads(1)
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
    failed = [name for name, check in report["checks"].items() if not check["passed"]]
    if failed:
        print(f"gpu-check: FAILED: {', '.join(failed)} (details in {args.out})", file=sys.stderr)
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
            f"vLLM {check['vllm_version']} on V1: greedy {check['greedy_vs_engine']['identical']}/"
            f"{check['greedy_vs_engine']['prompts']}, self-draft accept "
            f"{check['self_draft_accept_rate']}, sampler p-values {check['sampler']['p_values']},"
            f" time ours/vLLM {check['sampler']['time_ratio']}x"
        )
    if name == "qwen3_vocab":
        return ", ".join(
            f"{dtype} " + ("skipped" if "skipped" in r else f"{r['identical']}/{r['prompts']}")
            for dtype, r in check["by_dtype"].items()
        )
    if name == "first_token_law":
        return ", ".join(
            f"{rule} p={r['p_value_vs_rule_law']}" for rule, r in check["rules"].items()
        )
    return ""


if __name__ == "__main__":
    sys.exit(main())
