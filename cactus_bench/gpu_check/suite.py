"""The GPU check's suite: which checks, in what order, on what, within which time budget.

`run_checks` runs every check in CHECKS (measurements.py, laws.py, vllm_check.py) against a
`Context` (each dtype's pair loaded once, the demo prompts) and yields each one's JSON-ready result
as it finishes: timed, an error recorded instead of raised (the other checks still run). Every
result has a `status`: "passed", "failed", "skipped" (named in --skip, or a part this machine
cannot run, such as bf16 on a CPU without it) or "incomplete" (the time budget was spent before
it started; scripts/gpu_check.py then exits with its own INCOMPLETE status). Only a check that ran
can pass: a skipped or incomplete one has `passed` false. vLLM's check runs first: it is the one
a GPU node is needed for, and the slowest to start. scripts/gpu_check.py writes and summarises
them.
"""

from __future__ import annotations

import datetime as dt
import platform
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from cactus_bench.store.metadata import device_name, git_state

REPO = Path(__file__).resolve().parents[2]
TORCH_VERSION = "2.13.0"  # the Makefile's TORCH_VERSION
CHECKS = (
    "vllm",  # first: engine starts take minutes, and the budget must not crowd it out
    "greedy_float32",
    "greedy_bfloat16",
    "greedy_float16",
    "cuda_graphs",
    "qwen3_vocab",
    "first_token_law",
    "sampler_bench",
    "verify_cost",
    "speedup",
)
VLLM_PYTHON = REPO / ".venv-vllm/bin/python"
# --dry: the CPU, the tiny random pair, small sizes (every check's logic, not the GPU)
DRY = {"device": "cpu", "pair": "tiny_random", "prompts": 2, "new_tokens": 6, "budget_s": 1800}


def cuda_problem(device: str) -> str | None:
    """None when `device` is usable, else one line naming the fix."""
    import torch  # lazy: keeps torch out of the command's start-up

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


class Context:
    """Loads each dtype's pair once; prompts from the verifier's chat template. `args` holds
    device, pair, prompts, new_tokens, m, dry and vllm_python (scripts/gpu_check.py's flags)."""

    def __init__(self, args):
        import torch  # lazy: keeps torch out of the command's start-up

        from cactus_bench.gpu_check.measurements import demo_prompts  # lazy: pulls in torch

        self.args, self.device = args, torch.device(args.device)
        self._pairs = {}
        self.prompts = demo_prompts(self.pair("float32").tokenizer, args.prompts)

    def pair(self, dtype: str):
        from cactus_bench.models import load_pair  # lazy: pulls in torch

        if dtype not in self._pairs:
            self._pairs[dtype] = load_pair(self.args.pair, device=self.device, dtype=dtype)
        return self._pairs[dtype]


def run_check(name: str, ctx: Context) -> dict:
    from cactus_bench.gpu_check import measurements as g  # lazy: pulls in torch
    from cactus_bench.gpu_check.laws import NO_CPU_BF16, dtype_runs  # lazy: pulls in torch

    args, device, prompts = ctx.args, ctx.device, ctx.prompts
    low = "bfloat16" if dtype_runs(device, "bfloat16") else "float32"  # --dry on such a CPU
    if name.startswith("greedy_"):
        dtype = name.removeprefix("greedy_")
        if not dtype_runs(device, dtype):
            return skipped(NO_CPU_BF16)
        return g.greedy_equality(ctx.pair(dtype), prompts, args.new_tokens, args.m, dtype, device)
    if name == "qwen3_vocab":
        from cactus_bench.gpu_check.laws import qwen3_vocab  # lazy: pulls in torch

        dtypes = ("float32", "bfloat16", "float16")
        return qwen3_vocab(device, dtypes, len(prompts), args.new_tokens, args.m)
    if name == "first_token_law":
        from cactus_bench.gpu_check.laws import first_token_law  # lazy: pulls in torch

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
        from cactus_bench.gpu_check.vllm_check import vllm_check  # lazy: pulls in torch

        return vllm_check(args, device)
    raise ValueError(f"unknown check {name!r}; known: {', '.join(CHECKS)}")


def skipped(why: str) -> dict:
    """A check that did not run because it was not asked for (or cannot run here): never a pass."""
    return {"status": "skipped", "skipped": why, "passed": False}


def incomplete(why: str) -> dict:
    """A check the time budget left out: it did not run, so it cannot pass."""
    return {"status": "incomplete", "skipped": why, "incomplete": True, "passed": False}


def with_status(result: dict) -> dict:
    """The result with its `status` (module doc) set from what it says."""
    if "status" not in result:
        result["status"] = "passed" if result["passed"] else "failed"
    return result


def tree_field() -> str:
    """ "clean" / "dirty" / "unknown" at the commit: a report's first field, so one from a tree
    with uncommitted code says so at once (results/ does not count: store.metadata.git_state)."""
    sha, dirty = git_state()
    state = {True: "dirty", False: "clean"}.get(dirty, "unknown")
    return f"{state} at {(sha or 'no commit')[:12]}"


def environment(device: str) -> dict:
    import torch  # lazy: keeps torch out of the command's start-up
    import transformers  # lazy: keeps torch out of the command's start-up

    sha, dirty = git_state()
    return {
        "tree": tree_field(),
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": device_name(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "git_sha": sha,
        "git_dirty": dirty,
    }


def run_checks(
    ctx: Context, skip: set[str], budget_s: float, started: float
) -> Iterator[tuple[str, dict]]:
    """(name, result) for every check in CHECKS, in order, each as soon as it is done; a check
    in `skip` is skipped (status "skipped", not passed); one that would start `budget_s` seconds
    after `started` (perf_counter) is incomplete (not passed)."""
    for name in CHECKS:
        if name in skip:
            yield name, skipped("--skip")
            continue
        if time.perf_counter() - started > budget_s:
            why = f"time budget ({budget_s:.0f} s) spent; rerun with a larger --budget-s"
            yield name, incomplete(why)
            continue
        print(f"gpu-check: {name} ...", flush=True)
        check_start = time.perf_counter()
        try:
            result = run_check(name, ctx)
        except Exception as error:  # recorded; the other checks still run
            lines = traceback.format_exception_only(error)
            result = {"error": lines[-1].strip(), "passed": False}
        result["seconds"] = round(time.perf_counter() - check_start, 1)
        yield name, with_status(result)
