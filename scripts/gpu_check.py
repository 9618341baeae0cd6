"""make gpu-check: everything a first GPU contact needs, about 10 minutes on one GPU.

    make gpu-check                      # writes results/bench/gpu_check.json, prints a summary
    make gpu-check DRY=1                # every check's CPU part, small (CI runs it)
    python scripts/gpu_check.py --budget-s 300 --skip vllm

On the embedded pair (SmolLM2-135M-Instruct and its distilled drafter, `make setup`):
1. vllm (first, so the budget never crowds it out): in .venv-vllm (scripts/gpu_check_vllm.py),
   two engines: SpS with enforce_eager: V2 refused in one line and the engine started on runner
   V1 with the rule; vLLM's greedy speculative tokens equal the HF engine's greedy tokens
   (near-ties allowed); self-drafting under SpS accepted >= 0.99 (only with the patched drafter
   law); vLLM's own rejection sampler and this project's sps at V = 151,936 both emit q
   (chi-square), and their time ratio; Cactus with CUDA graphs on (enforce_eager=False). Both
   engines' workers must report calls of the patched drafter law and of the bridge;
2. greedy_float32 / _bfloat16 / _float16: speculative (SpS, m = 4) and autoregressive greedy
   decoding emit the same tokens on CUDA, up to near-ties
   (cactus_bench/gpu_check/measurements.py says how ties are judged; divergences are counted);
3. cuda_graphs: whole forwards replayed as CUDA graphs decode as the eager fast forward;
4. qwen3_vocab: the same equality on a random Qwen3-architecture pair at V = 151,936, each dtype;
5. first_token_law: sps's and cactus's first emitted token on the device against the exact law
   (chi-square; cactus must also reject q, so the check can fail);
6. sampler_bench: every rule's verify vs the naive path at V = 151,936;
7. verify_cost / 8. speedup: verifier step costs, the pair's Cactus speedup for m = 1..4.
Each check is timed and guarded: an error is recorded in the JSON (written after every check)
and the run goes on. Each check's `status` is passed, failed, skipped (--skip, or a part this
machine cannot run) or incomplete (the time budget was spent first); only a check that ran
passes. The JSON's first field, `tree`, says whether the code was committed (clean) or not
(dirty); its `passed` is true only when every check ran and passed, and `skipped` names those
skipped. Exit status 0 when none failed and none was left out by the budget (skips were asked
for; the summary prints them as skipped, never ok), 1 when one failed (loudly: the failed checks
are listed), 3 (INCOMPLETE) when none failed but a check did not run because the time budget was
spent, 2 without a usable GPU (one line naming the fix). `--dry` runs on the CPU with the
tiny random pair and small sizes: the script and every check's logic, not the GPU. The checks
and their order live in cactus_bench/gpu_check/ (suite.py); this script takes the flags, writes
and summarises.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INCOMPLETE = 3  # exit status: nothing failed, but a check did not run (budget spent)


def parse_args() -> argparse.Namespace:
    from cactus_bench.gpu_check.suite import CHECKS, DRY, VLLM_PYTHON

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "results/bench/gpu_check.json")
    parser.add_argument("--device", default="cuda", help="cuda (cpu only for smoke tests)")
    parser.add_argument("--pair", default="smollm2_135m", help="registered pair to check")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--m", type=int, default=4, help="draft length of the equality checks")
    parser.add_argument(
        "--budget-s", type=float, default=None, help="no check starts after it (default 600)"
    )
    parser.add_argument("--skip", default="", help=f"comma-separated, of: {', '.join(CHECKS)}")
    parser.add_argument("--dry", action="store_true", help="CPU, tiny pair, small sizes (CI)")
    parser.add_argument("--vllm-python", type=Path, default=VLLM_PYTHON)
    args = parser.parse_args()
    if args.dry:  # an explicit --budget-s still holds
        for key, value in DRY.items():
            if not (key == "budget_s" and args.budget_s is not None):
                setattr(args, key, value)
    if args.budget_s is None:
        args.budget_s = 600.0
    return args


def main() -> int:
    from cactus_bench.gpu_check.suite import CHECKS, Context, cuda_problem, environment, run_checks

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
    for name, result in run_checks(ctx, skip, args.budget_s, started):
        report["checks"][name] = result
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        statuses = {name: check["status"] for name, check in report["checks"].items()}
        report["passed"] = all(status == "passed" for status in statuses.values())
        report["complete"] = "incomplete" not in statuses.values()
        report["skipped"] = [name for name, status in statuses.items() if status == "skipped"]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"gpu-check: wrote {args.out}")
    checks = report["checks"]
    failed = [name for name, check in checks.items() if check["status"] == "failed"]
    missing = [name for name, check in checks.items() if check["status"] == "incomplete"]
    if failed:
        print(f"gpu-check: FAILED: {', '.join(failed)} (details in {args.out})", file=sys.stderr)
        return 1
    if missing:
        print(
            f"gpu-check: INCOMPLETE: {', '.join(missing)} did not run (time budget "
            f"{args.budget_s:.0f} s spent); rerun with a larger --budget-s",
            file=sys.stderr,
        )
        return INCOMPLETE
    return 0


def summary(report: dict) -> str:
    lines = [
        f"gpu-check on {report['device']} (torch {report['torch']}, CUDA {report['cuda']}), "
        f"{report['elapsed_s']:.0f} s; tree {report['tree']}"
    ]
    shown = {"passed": "ok", "failed": "FAILED", "skipped": "skipped", "incomplete": "INCOMPLETE"}
    for name, check in report["checks"].items():
        status = shown[check["status"]]
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
            f"capture {check['capture_s']} s; AR {check['autoregressive']['identical']}/"
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
            f"{check['self_draft_accept_rate']}, patched calls {check['patched_calls']}, "
            f"sampler p-values {check['sampler']['p_values']}, time ours/vLLM "
            f"{check['sampler']['time_ratio']}x"
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
