"""docs/architecture.md names only what exists: every `cactus_bench.…` reference imports, every
file path is in the repository, and every function, method or attribute it calls or reads in
its code spans is defined by the package, the scripts or the libraries it names."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEXT = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
# inline `code` and ``` fenced blocks: where the document names code
FENCED = re.findall(r"```[a-z]*\n(.*?)```", TEXT, re.S)
INLINE = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", TEXT, flags=re.S))
CODE = [*FENCED, *INLINE]
SOURCES = sorted([*(REPO / "cactus_bench").rglob("*.py"), *(REPO / "scripts").glob("*.py")])
# What the document shows of the libraries it adapts: torch tensors, vLLM's files and names.
LIBRARY_NAMES = {"tensor", "sum", "generate", "LLM", "rejection_sample", "register"}
LIBRARY_FILES = {"rejection_sampler_utils.py"}  # vLLM's, where its runner V2's rule lives
LIBRARY_PATHS = re.compile(r"\b(?:vllm|torch)(?:\.\w+)+|\.venv[\w-]*")


def defined_names() -> set[str]:
    """Every function, class, method, parameter, attribute and variable name in the code."""
    names = set(dir(builtins)) | {p.stem for p in SOURCES} | {p.parent.name for p in SOURCES}
    for path in [*SOURCES, REPO / "run.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.id if isinstance(node, ast.Name) else node.attr)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
    return names


def resolve(dotted: str):
    """Import the longest module prefix of `dotted`, then read the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("dotted", sorted(set(re.findall(r"cactus_bench(?:\.\w+)+", TEXT))))
def test_dotted_references_exist(dotted):
    resolve(dotted)


def test_imports_in_code_blocks_exist():
    for block in CODE:
        for module, names in re.findall(r"from (cactus_bench[\w.]*) import ([\w, ]+)", block):
            for name in names.split(","):
                assert hasattr(resolve(module), name.strip()), f"{module}.{name.strip()}"


def test_file_paths_exist():
    paths = {m for span in CODE for m in re.findall(r"[\w./-]+\.(?:py|md|yaml|toml)\b", span)}
    paths |= {m for span in INLINE for m in re.findall(r"^[\w.-]+(?:/[\w.-]+)*/$", span)}
    assert paths
    files = {p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if ".venv" not in p.parts}
    for path in sorted(paths - LIBRARY_FILES):
        stem = path.rstrip("/").removeprefix("cactus_bench/")
        found = any(f == stem or f.endswith("/" + stem) for f in files)
        assert found, f"docs/architecture.md names {path}, which is not in the repository"


def test_called_and_read_names_exist():
    """Calls `name(` and attribute reads `.name` in code spans are defined somewhere."""
    known = defined_names() | LIBRARY_NAMES
    used = set()
    for span in CODE:
        span = re.sub(r"#[^\n]*", "", span)  # comments describe, they do not call
        span = LIBRARY_PATHS.sub("", span)
        used |= set(re.findall(r"\b([A-Za-z_]\w*)\(", span))
        used |= set(re.findall(r"\.([A-Za-z_]\w*)\b", span))
    used -= {"py", "md", "yaml", "csv", "jsonl", "json", "toml", "txt", "safetensors", "png"}
    missing = sorted(name for name in used if name not in known)
    assert not missing, f"docs/architecture.md names {missing}, which the code does not define"
