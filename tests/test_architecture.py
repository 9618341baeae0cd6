"""The package's shape: which layer may import which, no import cycle, files of one meaning.

Data flows one way (docs/architecture.md): config -> pair + sampler + task -> engine -> records ->
CSV row -> tables/plots. A layer imports only the layers listed for it below (imports inside
functions count too: a lazy import is still a dependency); imports form no cycle, lazy or not.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "cactus_bench"
# A guide, not a wall: files are split by meaning, and one this long holds more than one.
MAX_LINES = 300

# layer -> the other layers it may import (a layer may always import itself)
ALLOWED: dict[str, set[str]] = {
    "paper": set(),
    "samplers": set(),
    "engine": {"samplers", "paper"},
    "models": {"engine"},
    "tasks": {"engine", "paper"},
    "run_settings": {"samplers", "paper", "tasks"},
    "store": {"run_settings"},
    "report": {"store"},
    "vllm": {"engine", "samplers", "models"},
    "bench": {"engine", "models", "samplers", "paper", "tasks"},
    "rehearsal": {"models"},
    "frontier": {"engine", "samplers", "models", "tasks", "paper", "store", "report"},
    "gpu_check": {"bench", "engine", "samplers", "models", "tasks", "store", "vllm"},
    "run": {
        "paper",
        "samplers",
        "engine",
        "models",
        "tasks",
        "run_settings",
        "store",
        "vllm",
        "frontier",
    },
    "__init__": set(),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path) -> tuple[set[str], set[str]]:
    """(every cactus_bench module imported anywhere in the file, those imported at module level;
    imports under `if TYPE_CHECKING:` never run, so they are not module-level)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    everywhere, top = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path}: use absolute imports (cactus_bench.x), not relative"
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if name == "cactus_bench" or name.startswith("cactus_bench."):
                everywhere.add(name)
                if node in tree.body:
                    top.add(name)
    return everywhere, top


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_layers_import_only_downward(module):
    layer = layer_of(module)
    assert layer in ALLOWED, f"{module}: a new layer; add it to ALLOWED and docs/architecture.md"
    everywhere, _ = imports_of(MODULES[module])
    for imported in everywhere:
        target = layer_of(imported)
        if target not in (layer, "__init__"):
            assert target in ALLOWED[layer], f"{module} imports {imported} (upward or sideways)"


def test_module_level_imports_form_no_cycle():
    graph = {}
    for module, path in MODULES.items():
        _, top = imports_of(path)
        # `from cactus_bench.x import y` may name a module x.y or a name in x: resolve to modules
        graph[module] = {m for m in top if m in MODULES} | {
            m.rpartition(".")[0]
            for m in top
            if m not in MODULES and m.rpartition(".")[0] in MODULES
        }
    assert_acyclic(graph)


def running_imports_of(path: Path) -> set[str]:
    """Every cactus_bench module `path` imports when its code runs, at module level or inside a
    function (a lazy import is still an edge of a cycle); `from package import module` names
    that module. Imports under `if TYPE_CHECKING:` never run and are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    unread = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for inner in ast.walk(node)
    }
    modules = set()
    for node in ast.walk(tree):
        if id(node) in unread:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            named = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name for name in named if name in MODULES] or [node.module]
        else:
            continue
        for name in names:
            while name not in MODULES and "." in name:
                name = name.rpartition(".")[0]  # a name in a module: that module
            if name in MODULES and name != "cactus_bench":
                modules.add(name)
    return modules


def test_imports_anywhere_form_no_cycle():
    """Lazy (function-level) imports count: hiding a cycle inside a function leaves it a cycle,
    and so does a module that imports its own package's __init__ while that imports it."""
    graph = {module: running_imports_of(path) for module, path in MODULES.items()}
    assert_acyclic(graph, own_package_skipped=False)


def assert_acyclic(graph: dict[str, set[str]], own_package_skipped: bool = True) -> None:
    """Depth-first search; fails naming the first cycle it meets."""
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or (own_package_skipped and nxt == node.rpartition(".")[0]):
                continue  # a package importing its own submodule, or a module its package
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


SCRIPTS = {p.stem: p for p in sorted((PACKAGE.parent / "scripts").glob("*.py"))}


def top_level_names(path: Path) -> set[str]:
    """The first component of every module `path` imports, anywhere in the file."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_scripts_are_entry_points_without_import_cycles():
    """A script may import the package and another script's code (a worker it starts), but no
    two scripts import each other, even inside functions; the package imports no script (the
    benches' shared code lives in cactus_bench.bench)."""
    assert len(SCRIPTS) > 10
    graph = {name: top_level_names(path) & set(SCRIPTS) for name, path in SCRIPTS.items()}
    assert_acyclic(graph)
    for module, path in MODULES.items():
        assert not top_level_names(path) & set(SCRIPTS), f"{module} imports a script"


# The folders (and modules) whose function-level imports are checked below: every one.
LAZY_CHECKED = (
    "store",
    "report",
    "models",
    "rehearsal",
    "frontier",
    "bench",
    "paper.py",
    "run",
    "tasks",
    "engine",
    "samplers",
    "run_settings",
    "__init__.py",
    "vllm",
    "gpu_check",
)
LAZY_NOT_YET: tuple[str, ...] = ()


def uncommented_lazy_imports(path: Path) -> list[int]:
    """Lines of the imports inside functions that have no trailing `# lazy: <why>` comment (on
    any line of the statement, for one the formatter wraps)."""
    source = path.read_text(encoding="utf-8")
    comments = {
        token.start[0]
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT and token.string.startswith("# lazy:")
    }
    lines = set()
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                    if not comments.intersection(span):
                        lines.add(node.lineno)
    return sorted(lines)


def test_imports_sit_at_the_top_unless_they_say_why():
    """An import inside a function keeps a heavy library (torch, transformers, vLLM, lm-eval,
    matplotlib, pandas, wandb, huggingface_hub, ...) out of a command's start-up (never to hide
    an import cycle: that stays a cycle); it says why in a trailing `# lazy: ...` comment. Any
    other import sits at the top of the module."""
    checked = [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] in LAZY_CHECKED
        and path.relative_to(PACKAGE).as_posix() not in LAZY_NOT_YET
    ]
    assert len(checked) > 50
    missing = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in checked
        for line in uncommented_lazy_imports(path)
    ]
    assert not missing, "function-level imports without a `# lazy: why` comment: " + ", ".join(
        missing
    )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_files_stay_short(module):
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{module} has {lines} lines; split it by meaning"


# File names that several packages share because each holds the same role in its own package
# (docs/architecture.md, "Names"); any other name belongs to one module only.
SAME_ROLE_NAMES = {
    "__init__": "the package front",
    "__main__": "the package's command line",
    "conf": "the settings dataclass of an entry point (run/, frontier/)",
    "decoder": "a Decoder implementation (engine/: the HF engine's, vllm/: vLLM's)",
    "plots": "the figures of a report (report/, frontier/)",
    "registry": "names to things (models/: pairs, samplers/: rules)",
}


def test_module_file_names_are_unique_but_for_parallel_roles():
    by_name: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        by_name.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    unexplained = {name: paths for name, paths in shared.items() if name not in SAME_ROLE_NAMES}
    assert not unexplained, f"modules sharing a file name: {unexplained}; rename one"
    stale = set(SAME_ROLE_NAMES) - set(shared)
    assert not stale, f"SAME_ROLE_NAMES lists {sorted(stale)}, which one module holds: drop it"


def test_the_formatter_lays_out_the_code():
    """`# fmt: skip` only where a table reads better than the formatter's layout (at most 10)."""
    repo = PACKAGE.parent
    files = [
        *PACKAGE.rglob("*.py"),
        *(repo / "scripts").rglob("*.py"),
        *(repo / "tests").rglob("*.py"),
    ]
    marker = "# fmt" + ": skip"  # spelled in two parts so that this file does not count itself
    skips = {str(p.relative_to(repo)): p.read_text(encoding="utf-8").count(marker) for p in files}
    assert sum(skips.values()) <= 10, {path: n for path, n in skips.items() if n}


def defined_names(path: Path) -> set[str] | None:
    """The names a module defines at its top level (under `if`/`try` too), or None for a lazy
    package front whose `__getattr__` resolves names at run time."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "__getattr__" and node.col_offset == 0:
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_every_imported_name_exists():
    """`from cactus_bench.x import name`, anywhere in the package, the scripts or the tests, names
    something x defines or a submodule of x: a rename cannot leave a stale import behind in a
    file no test runs (a bench script once imported a name from a module that had lost it)."""
    files = [*MODULES.values(), *SCRIPTS.values(), *sorted(PACKAGE.parent.glob("tests/*.py"))]
    stale = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.module not in MODULES:
                continue
            defined = defined_names(MODULES[node.module])
            for alias in node.names:
                if defined is None or alias.name in defined:
                    continue
                if f"{node.module}.{alias.name}" not in MODULES:
                    stale.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
    assert not stale, f"imported names that do not exist: {stale}"


# Private names (one leading underscore) that the code reads on another library's objects or
# modules, each because the library has no public spelling for what the code needs. A name here
# passes wherever it is read, so the project itself may define none of them (checked below).
LIBRARY_PRIVATE_NAMES = {
    "_dynamo": "torch: torch.compile's reset, recompile limit and mark_static_address",
    "_inductor": "torch: inductor's config (its FX graph cache)",
    "_fused_sdp_choice": "torch: the kernel SDPA dispatch picks for given inputs (a bench asks)",
    "_is_mkldnn_bf16_supported": "torch: whether oneDNN runs bf16 on this CPU",
    "_reorder_linear_weight": "torch: oneDNN's weight packing, as torch's inductor calls it",
    "_linear_pointwise": "torch: oneDNN's linear on a packed weight, as torch's inductor calls it",
    "_version": "torch: a tensor's in-place version counter (re-packs weights edited in place)",
    "_asdict": "stdlib: a namedtuple's public method, underscored so that no field hides it",
    "_hf_hook": "accelerate: the hook a module dispatched over devices carries",
    "_filters": "lm-eval: a task's filter pipelines, which lm-eval has no public setter for",
    "_python_dispatch": "torch: TorchDispatchMode's module, the only path torch gives it",
    "_yaml_loader": "lm-eval: its task YAML loader (includes merged), exported nowhere public",
    "_custom_ops": "vLLM: its kernel ops module, whose linear a bench times",
}


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reads(source: str, here: str = "") -> list[tuple[int, str, str]]:
    """(line, private name, code) for each private name `source` reads that it does not own:
    `x._name` or getattr(x, "_name") on anything but self, cls, super() or a class or function
    the file defines; `from m import _name` or `import a._b` from outside the module or package
    that holds the name. here: the file's module (a.b.c may import a.b._d: its own package's)."""
    tree = ast.parse(source)
    defined = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    own = {"self", "cls"} | {node.name for node in ast.walk(tree) if isinstance(node, defined)}

    def owned(base: ast.expr) -> bool:
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name):
            return base.func.id == "super"
        return isinstance(base, ast.Name) and base.id in own

    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and not owned(node.value):
            reads.append((node.lineno, node.attr, ast.unparse(node)))
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ATTRIBUTE_FUNCTIONS:
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant):
                name = node.args[1].value
                if isinstance(name, str) and is_private(name) and not owned(node.args[0]):
                    reads.append((node.lineno, name, ast.unparse(node)))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if isinstance(node, ast.Import):
                paths = [alias.name for alias in node.names]
            else:
                paths = [f"{node.module}.{alias.name}" for alias in node.names if node.module]
            for path in paths:
                parts = path.split(".")
                for index, part in enumerate(parts):
                    holder = ".".join(parts[:index])
                    if is_private(part) and not here.startswith(holder + "."):
                        reads.append((node.lineno, part, ast.unparse(node)))
    return reads


ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "hasattr", "delattr")


def test_no_module_reads_another_modules_private_names():
    """A name with a leading underscore belongs to the file that defines it: a module that needs
    another's is given a public name (or the logic moves to its owner), so a private name can be
    changed by reading one file. Libraries' private names: LIBRARY_PRIVATE_NAMES only."""
    files = {**MODULES, **SCRIPTS}
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {code}"
        for module, path in files.items()
        for line, name, code in private_reads(path.read_text(encoding="utf-8"), module)
        if name not in LIBRARY_PRIVATE_NAMES
    ]
    assert not found, "reads of another module's private names: " + "; ".join(found)


def test_the_private_name_rule_flags_a_planted_read():
    planted = """
import torch._dynamo
from cactus_bench.store.csv_store import _append
from cactus_bench.samplers.rules._builder import Builder


class Own:
    _cache = None

    def read(self, runner):
        runner._packs.head  # flagged
        getattr(runner, "_kept", None)  # flagged
        return self._cache, Own._cache, super()._cache, self.runner._tables  # the last flagged
"""
    reads = private_reads(planted, "cactus_bench.samplers.rules.fly")
    assert {name for _, name, _ in reads} == {"_dynamo", "_append", "_packs", "_kept", "_tables"}
    outside = private_reads(planted, "cactus_bench.engine.fast_runner")
    assert {name for _, name, _ in outside} - {name for _, name, _ in reads} == {"_builder"}


def test_library_private_names_are_read_and_defined_by_no_module_of_ours():
    """An allow-listed name the project defined would let a read of the project's own private
    name pass; one nothing reads any more is dropped from the list."""
    files = [*MODULES.values(), *SCRIPTS.values()]
    ours = {path.stem for path in files}
    read = set()
    for path in files:
        source = path.read_text(encoding="utf-8")
        read |= {name for _, name, _ in private_reads(source)}
        tree = ast.parse(source)
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                ours.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                ours.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
    assert not set(LIBRARY_PRIVATE_NAMES) & ours, "allow-listed names the project defines"
    assert not set(LIBRARY_PRIVATE_NAMES) - read, "allow-listed names nothing reads"


def test_the_docs_layer_table_is_the_one_enforced_here():
    """docs/architecture.md's layer table lists ALLOWED, layer for layer."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.M)
    table = {layer: {n.strip() for n in imports.split(",")} - {"-"} for layer, imports in rows}
    assert table == {
        layer: set(allowed) for layer, allowed in ALLOWED.items() if layer != "__init__"
    }


TRAINING = PACKAGE.parent / "training"


def test_the_package_never_imports_training():
    """training/ (how the embedded drafter was distilled) is not runtime code: it may import
    cactus_bench, and no package module imports it, even inside a function. Its files keep the
    package's other rules: at most MAX_LINES lines, and a lazy import says why."""
    files = sorted(TRAINING.glob("*.py"))
    assert len(files) > 5
    importers = {module for module, path in MODULES.items() if "training" in top_level_names(path)}
    assert not importers, f"package modules importing training/: {importers}"
    for path in files:
        assert path.read_text(encoding="utf-8").count("\n") <= MAX_LINES, path.name
        assert not uncommented_lazy_imports(path), f"{path.name}: a lazy import without `# lazy:`"
