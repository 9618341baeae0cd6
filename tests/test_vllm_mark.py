"""The `vllm` mark (pyproject.toml): a test that needs vLLM carries it, and `make test-vllm`
selects by it (inside .venv-vllm); the tests without it run in `make test`, once.

Read from the sources with `ast`: a test module that imports vLLM (outside a `try` that catches
the ImportError: that test checks vLLM's absence), calls pytest.importorskip("vllm"), or names a
worker script of tests/ that imports vLLM or builds an engine (cactus_bench.vllm.engines),
carries the mark, module-wide (`pytestmark`) or on the test function that does it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MARK = "pytest.mark.vllm"
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _catches_import_error(node: ast.Try) -> bool:
    names = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
    return bool(names & IMPORT_ERRORS) or any(h.type is None for h in node.handlers)


def _is_vllm(module: str | None) -> bool:
    return module is not None and (module == "vllm" or module.startswith("vllm."))


def uses_vllm(node: ast.AST, workers: frozenset[str] = frozenset()) -> bool:
    """`node` imports vLLM, importorskips it, or imports / names one of `workers` (module names)."""
    if isinstance(node, ast.Try) and _catches_import_error(node):
        rest = [*node.handlers, *node.orelse, *node.finalbody]
        return any(uses_vllm(child, workers) for child in rest)
    if isinstance(node, ast.Import):
        return any(_is_vllm(a.name) or a.name in workers for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (_is_vllm(node.module) or node.module in workers)
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("importorskip"):
        first = node.args[0] if node.args else None
        return isinstance(first, ast.Constant) and first.value == "vllm"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.removesuffix(".py") in workers and node.value.endswith(".py")
    return any(uses_vllm(child, workers) for child in ast.iter_child_nodes(node))


def _module_marked(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Assign)
        and any(ast.unparse(t) == "pytestmark" for t in node.targets)
        and MARK in ast.unparse(node.value)
        for node in tree.body
    )


def unmarked(tree: ast.Module, workers: frozenset[str]) -> list[str]:
    """What in a test module uses vLLM without the mark: function names, or 'module'."""
    if _module_marked(tree):
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            decorated = any(MARK in ast.unparse(d) for d in node.decorator_list)
            if not decorated and uses_vllm(node, workers):
                found.append(node.name)
        elif uses_vllm(node, workers):
            found.append("module")
    return found


def vllm_workers() -> frozenset[str]:
    """The helper modules of tests/ (not test modules) that import vLLM or build an engine."""
    engines = frozenset({"cactus_bench.vllm.engines"})
    return frozenset(
        path.stem
        for path in TESTS.glob("*.py")
        if not path.name.startswith("test_") and uses_vllm(ast.parse(path.read_text()), engines)
    )


def test_every_test_that_needs_vllm_carries_the_mark():
    workers = vllm_workers()
    assert {"agreement_worker", "engine_worker", "own_sampler_worker"} <= workers, workers
    found = {}
    marked = 0
    for path in sorted(TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        marked += _module_marked(tree)
        if missing := unmarked(tree, workers):
            found[path.name] = missing
    assert not found, f"these use vLLM without @{MARK} (make test-vllm selects by it): {found}"
    assert marked >= 5  # the real-engine modules (agreement, engine, own sampler, ...)


def test_the_check_catches_an_unmarked_use_and_passes_the_marked_ones():
    workers = frozenset({"some_worker"})
    bad = ast.parse(
        "import pytest\n"
        "def test_a():\n    pytest.importorskip('vllm')\n"
        "def test_b():\n    from vllm import LLM\n"
        "def test_c():\n    run('some_worker.py')\n"
        "def test_d():\n    try:\n        import vllm\n    except ImportError:\n        pass\n"
    )
    assert unmarked(bad, workers) == ["test_a", "test_b", "test_c"]
    good = ast.parse("import pytest\n@pytest.mark.vllm\ndef test_a():\n    import vllm.platforms\n")
    assert unmarked(good, workers) == []
    module = ast.parse(
        "import pytest\npytest.importorskip('vllm')\npytestmark = pytest.mark.slow\n"
    )
    assert unmarked(module, workers) == ["module"]
    module.body[-1] = ast.parse("pytestmark = [pytest.mark.slow, pytest.mark.vllm]").body[0]
    assert unmarked(module, workers) == []


def test_make_test_vllm_selects_by_the_mark():
    makefile = (TESTS.parent / "Makefile").read_text()
    recipe = re.search(r"^test-vllm:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    assert "-m vllm" in recipe, recipe
