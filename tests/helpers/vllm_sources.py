"""vLLM's sources, read without importing vLLM (Python's `ast`; no CUDA needed), and the checker
the conformance tests share (tests/test_vllm_conformance.py says what they check on each line).

- the sources: vLLM 0.33.0's GPU wheel (line V1: the last release with model runner V1), 0.34.0's
  (line V2: runner V2 only) and the Makefile's VLLM_GPU_VERSION if it is another, each fetched
  once with `pip download --no-deps` into ~/.cache/cactus_bench/wheels (CACTUS_BENCH_WHEEL_CACHE
  overrides) and read member by member from the zip (no unpacking); and the vLLM installed here,
  when there is one. Without the registry a wheel's tests skip with the reason.
- `sources(line)` gives them as test parameters, `open_source(param)` opens one;
- `tree`, `function`, `parameters`, `bare_calls`, `class_fields`: a source file's syntax tree and
  what the checks read of it; `ours`, `check_calls`: our replacement's parameters against the
  calls vLLM makes of its original.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cactus_bench.vllm import lines

REPO = Path(__file__).resolve().parents[2]
LAST_V1_VERSION = "0.33.0"
V2_VERSION = "0.34.0"  # the newest release, runner V2 only
GPU_VERSION = re.search(  # the Makefile's VLLM_GPU_VERSION: what TARGET=gpu installs
    r"^VLLM_GPU_VERSION \?= (\S+)", (REPO / "Makefile").read_text(), re.M
).group(1)
# Both lines' wheels are read whatever TARGET=gpu pins (0.33.0 while 0.34.0 cannot install).
WHEELS = tuple(dict.fromkeys((LAST_V1_VERSION, V2_VERSION, GPU_VERSION)))
CACHE = Path(os.environ.get("CACTUS_BENCH_WHEEL_CACHE", Path.home() / ".cache/cactus_bench/wheels"))


# ---- the sources ---------------------------------------------------------------------------------
class WheelSource:
    """Python files of a vLLM wheel, read from the zip."""

    def __init__(self, wheel: Path, version: str):
        self.zip = zipfile.ZipFile(wheel)
        self.names = {n for n in self.zip.namelist() if n.endswith(".py")}
        self.label = wheel.name
        self.line = lines.line_of(version)

    def read(self, path: str) -> str:
        return self.zip.read(path).decode()

    def paths(self):
        return sorted(self.names)


class InstalledSource:
    """Python files of the vLLM installed in this environment, read from disk."""

    def __init__(self, package: Path):
        self.root = package.parent
        self.names = {str(p.relative_to(self.root)) for p in package.rglob("*.py")}
        self.label = f"installed {package}"
        self.line = lines.installed_line()

    def read(self, path: str) -> str:
        return (self.root / path).read_text()

    def paths(self):
        return sorted(self.names)


def wheel(version: str) -> Path:
    found = sorted(CACHE.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[-1]
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    done = subprocess.run(
        [*command, f"vllm=={version}", "-d", str(CACHE)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    found = sorted(CACHE.glob(f"vllm-{version}-*.whl"))
    if done.returncode != 0 or not found:
        reason = done.stderr[-300:]
        pytest.skip(f"cannot fetch vllm=={version}'s wheel with pip download ({reason})")
    return found[-1]


def installed_line() -> str | None:
    if importlib.util.find_spec("vllm") is None or lines.installed() is None:
        return None
    return lines.installed_line()


def sources(line: str | None) -> list:
    """The sources on `line` (None: every source), as fixture parameters."""
    params = [
        pytest.param(f"wheel:{v}", id=f"vllm-{v}-gpu-wheel")
        for v in WHEELS
        if line in (None, lines.line_of(v))
    ]
    if installed_line() is not None and line in (None, installed_line()):
        params.append(pytest.param("installed", id="installed-vllm", marks=pytest.mark.vllm))
    return params


@functools.cache
def open_source(param: str):
    if param.startswith("wheel:"):
        version = param.removeprefix("wheel:")
        return WheelSource(wheel(version), version)
    return InstalledSource(Path(importlib.util.find_spec("vllm").origin).parent)


# ---- reading sources -----------------------------------------------------------------------------
def tree(source, path: str) -> ast.Module:
    assert path in source.names, f"{source.label}: no {path}"
    return ast.parse(source.read(path))


def function(module: ast.Module, name: str, in_class: str | None = None) -> ast.FunctionDef:
    body = module.body
    if in_class is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == in_class).body
    found = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"no {in_class + '.' if in_class else ''}{name}"
    return found[-1]


def parameters(node: ast.FunctionDef) -> list[str]:
    args = node.args
    return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]


def bare_calls(module: ast.Module, name: str) -> list[ast.Call]:
    """Calls of `name(...)` by bare name: they read the module global that a patch replaces."""
    return [
        n
        for n in ast.walk(module)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def class_fields(module: ast.Module, name: str) -> set[str]:
    klass = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name)
    return {n.target.id for n in klass.body if isinstance(n, ast.AnnAssign)}


def ours(function) -> tuple[list[str], set[str]]:
    """(positional parameter names, every name it reads) of one of our replacements."""
    signature = inspect.signature(function)
    positional = [
        name
        for name, p in signature.parameters.items()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return positional, set(signature.parameters)


def splat_keys(module: ast.Module, value: ast.expr) -> set[str]:
    """The keys `**self.helper(...)` can pass: the string keys of the helper's returned dicts."""
    assert isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute), ast.unparse(value)
    helpers = [
        n for n in ast.walk(module) if isinstance(n, ast.FunctionDef) and n.name == value.func.attr
    ]
    assert helpers, f"cannot follow **{ast.unparse(value)}"
    return {
        key.value
        for helper in helpers
        for ret in ast.walk(helper)
        if isinstance(ret, ast.Return) and isinstance(ret.value, ast.Dict)
        for key in ret.value.keys
        if isinstance(key, ast.Constant)
    }


def check_calls(module, calls: list[ast.Call], vllm_params: list[str], function, handled=()):
    """Each call's positional arguments land on our parameters of vLLM's names; keywords (those
    a `**helper()` splat passes included) are ones we read, or handle through **options."""
    positional, names = ours(function)
    assert calls, f"no call of {function.__name__}'s vLLM original by bare name"
    for call in calls:
        count = len(call.args)
        assert vllm_params[:count] == positional[:count], (vllm_params[:count], positional)
        for keyword in call.keywords:
            passed = {keyword.arg} if keyword.arg else splat_keys(module, keyword.value)
            assert passed <= names | set(handled), passed - names - set(handled)
