"""Line V2 (vllm >= 0.34, model runner V2 only): its source against what the backend patches and
calls there (the sources and the checker: tests/test_vllm_conformance.py).

- the rule: `rejection_sample` of rejection_sampler_utils.py is imported into
  vllm/v1/worker/gpu/spec_decode/rejection_sampler.py and called there by bare name with
  arguments the V2 bridge reads (a positional argument lands on the bridge's parameter of the
  same name), its keywords read or deliberately handled; the drafter's logits come in a
  `DraftLogitsCache` with `.values` [rows, K, V] and `.row_mapping`, which rejection_sample reads;
- the drafter's law: `register_speculative_method(name, config_cls)`; the standalone draft
  model's config (base "draft_model", a `speculator_class`) and speculator, built with
  (vllm_config, device); `sample_draft` samples and caches what `compute_draft_logits` returns,
  with the temperature applied; `prepare_propose` hands over the sampler; the per-request top-k /
  top-p live in `SamplingStates` buffers with a `.gpu` tensor;
- the runner: V2's `GPUModelRunner` does not derive from V1's, holds `self.speculator`, and
  calls prepare_propose before propose; runner V1's modules are gone, and
  VLLM_USE_V2_MODEL_RUNNER other than "1" is refused at engine start, as runner.select_runner
  refuses it before anything loads.
"""

from __future__ import annotations

import ast
import inspect

import pytest
from helpers.vllm_sources import (
    bare_calls,
    check_calls,
    function,
    open_source,
    ours,
    parameters,
    sources,
    tree,
)

from cactus_bench.vllm import bridge_v2, lines, runner, v2_law

SPEC = "vllm/v1/worker/gpu/spec_decode/"
V2_SAMPLER = SPEC + "rejection_sampler.py"
V2_UTILS = SPEC + "rejection_sampler_utils.py"
SPECULATOR = SPEC + "speculator.py"
STANDALONE = SPEC + "standalone_ar/speculator.py"


@pytest.fixture(scope="module", params=sources(lines.V2))
def v2_source(request):
    return open_source(request.param)


def self_attributes(node: ast.AST) -> set[str]:
    """Names assigned as `self.<name> = ...` (annotated or not) anywhere under `node`."""
    found = set()
    for n in ast.walk(node):
        targets = n.targets if isinstance(n, ast.Assign) else [getattr(n, "target", None)]
        for t in targets:
            if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self":
                found.add(t.attr)
    return found


def klass(module: ast.Module, name: str) -> ast.ClassDef:
    found = [n for n in module.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"no class {name}"
    return found[0]


# ---- the rule ------------------------------------------------------------------------------------
def test_v2_rejection_sample_matches_the_bridge(v2_source):
    utils = tree(v2_source, V2_UTILS)
    sample = function(utils, "rejection_sample")
    vllm_params = parameters(sample)
    handled = {*bridge_v2.V2_IGNORED, *bridge_v2.V2_WATERMARK}
    _, names = ours(bridge_v2.rejection_sample_v2)
    assert set(vllm_params) <= names | handled, set(vllm_params) - names - handled
    assert vllm_params[1] == "draft_logits_cache"
    module = tree(v2_source, V2_SAMPLER)
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
    check_calls(module, calls, vllm_params, bridge_v2.rejection_sample_v2, handled)
    # what the bridge reads of the cache is what vLLM's kernel reads
    read = {
        n.attr
        for n in ast.walk(sample)
        if isinstance(n, ast.Attribute) and ast.unparse(n.value) == "draft_logits_cache"
    }
    assert read == {"values", "row_mapping"}, read


def test_no_other_step_calls_its_own_rejection_sample(v2_source):
    """The plugin swaps the global of V2_SAMPLER only: any other module that imports
    rejection_sample by name would keep vLLM's rule. 0.34 has one, for watermarking, whose
    function nothing calls (and the bridge refuses watermarking)."""
    importers = {
        path
        for path in v2_source.paths()
        if "rejection_sampler_utils import" in (text := v2_source.read(path))
        and any(
            alias.name == "rejection_sample"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("_utils")
            for alias in node.names
        )
    }
    watermark = "vllm/v1/watermarking/spec_decode.py"
    assert importers <= {V2_SAMPLER, watermark}, importers - {V2_SAMPLER, watermark}
    if watermark in importers:
        callers = [
            path
            for path in v2_source.paths()
            if "watermarked_rejection_sample(" in v2_source.read(path) and path != watermark
        ]
        assert not callers, f"{callers} verify through watermarking's own rejection_sample"


def test_draft_logits_cache_layout(v2_source):
    module = tree(v2_source, SPEC + "draft_logits.py")
    cache = klass(module, "DraftLogitsCache")
    assert {"values", "row_mapping"} <= self_attributes(cache)
    text = ast.unparse(cache)
    assert "(num_rows, num_steps, vocab_size)" in text  # values: [rows, K, V]
    row = ast.unparse(function(module, "draft_logits_row"))
    assert "other=-1" in row  # a request without a row on this rank: -1 (the bridge rejects)
    kernel = v2_source.read(V2_UTILS)
    assert (
        "draft_logits is stored pre-temperature" in kernel and "/ temp" in kernel
    )  # softmax(logits / T): the law the bridge builds


# ---- the drafter's law ---------------------------------------------------------------------------
def test_speculative_methods_can_be_registered(v2_source):
    config = tree(v2_source, SPEC + "speculator_config.py")
    assert parameters(function(config, "register_speculative_method")) == ["name", "config_cls"]
    assert v2_law.METHOD not in v2_source.read(SPEC + "speculator_config.py")  # not built in
    standalone = tree(v2_source, SPEC + "standalone_ar/config.py")
    text = ast.unparse(klass(standalone, "StandaloneARSpeculatorConfig"))
    assert "base_method = 'draft_model'" in text and "speculator_class = " in text
    spec = v2_source.read("vllm/config/speculative.py")
    assert "get_custom_speculator_config_class(self.method)" in spec
    init = ast.unparse(function(tree(v2_source, SPEC + "__init__.py"), "init_speculator"))
    assert "speculator_config.speculator_class" in init


def test_the_speculator_hooks_we_override(v2_source):
    standalone = klass(tree(v2_source, STANDALONE), "StandaloneARSpeculator")
    bases = {ast.unparse(b) for b in standalone.bases}
    assert bases == {"AutoRegressiveSpeculator"}
    assert parameters(function(tree(v2_source, STANDALONE), "__init__", "StandaloneARSpeculator"))[
        :3
    ] == ["self", "vllm_config", "device"]
    draft = klass(tree(v2_source, SPECULATOR), "DraftModelSpeculator")
    assert {"temperature", "idx_mapping", "max_num_reqs"} <= self_attributes(draft)
    module = tree(v2_source, SPECULATOR)
    compute = function(module, "compute_draft_logits", "DraftModelSpeculator")
    assert parameters(compute) == ["self", "hidden_states", "spec_step_idx"]
    sample = function(module, "sample_draft", "DraftModelSpeculator")
    assert parameters(sample)[:4] == [
        "self",
        "hidden_states",
        "sample_src_positions",
        "idx_mapping",
    ]
    text = ast.unparse(sample)
    assert "logits = self.compute_draft_logits(hidden_states, spec_step_idx)" in text
    gumbel = bare_calls(sample, "gumbel_sample")
    assert gumbel, "sample_draft no longer samples with gumbel_sample"
    for call in gumbel:  # it draws from, and caches, the logits compute_draft_logits returned
        keywords = {k.arg: ast.unparse(k.value) for k in call.keywords}
        assert ast.unparse(call.args[0]) == "logits"
        assert keywords["apply_temperature"] == "True"
        assert keywords["logits_cache"] == "draft_logits.values"
    prepare = function(module, "prepare_propose", "DraftModelSpeculator")
    assert parameters(prepare) == ["self", "input_batch", "num_sampled", "num_rejected", "sampler"]
    ours_ = inspect.signature(v2_law.processed_law_logits).parameters
    assert list(ours_) == ["logits", "states", "temperature", "top_k", "top_p"]


def test_per_request_top_k_and_top_p(v2_source):
    states = klass(tree(v2_source, "vllm/v1/worker/gpu/sample/states.py"), "SamplingStates")
    init = ast.unparse(states)
    for name in ("temperature", "top_k", "top_p"):
        assert f"self.{name} = UvaBackedTensor(max_num_reqs" in init
    assert "self.top_k.np.fill(self.vocab_size)" in init  # off: V (v2_law treats >= V as off)
    assert "self.top_p.np.fill(1.0)" in init
    buffers = klass(tree(v2_source, "vllm/v1/worker/gpu/buffer_utils.py"), "UvaBackedTensor")
    assert "gpu" in self_attributes(buffers)
    sampler = ast.unparse(tree(v2_source, "vllm/v1/worker/gpu/sample/sampler.py"))
    assert "self.sampling_states = SamplingStates(" in sampler


# ---- the runner ----------------------------------------------------------------------------------
def test_v2_runner_is_told_apart_and_drafts_after_prepare(v2_source):
    path = "vllm/v1/worker/gpu/model_runner.py"
    model_runner = klass(tree(v2_source, path), "GPUModelRunner")
    assert "GPUModelRunner" not in {ast.unparse(base) for base in model_runner.bases}
    assert path.removesuffix(".py").replace("/", ".").startswith(runner.V2_RUNNER_PACKAGE)
    assert "speculator" in self_attributes(model_runner)  # the worker report reads it
    # every real step hands the sampler over before drafting (a dummy run drafts on -1 rows,
    # which the processed law leaves alone, so its buffers' defaults do)
    steps = [
        ast.unparse(n)
        for n in model_runner.body
        if isinstance(n, ast.FunctionDef)
        and n.name != "_dummy_run"
        and "self.speculator.propose(" in ast.unparse(n)
    ]
    assert steps
    for text in steps:
        assert (
            0
            <= text.find("self.speculator.prepare_propose(")
            < text.index("self.speculator.propose(")
        ), "a step drafts without prepare_propose"


def test_runner_v1_is_gone_and_its_variable_refused(v2_source):
    for gone in ("vllm/v1/worker/gpu_model_runner.py", "vllm/v1/sample/rejection_sampler.py"):
        assert gone not in v2_source.names  # the worker report imports neither on V2
    interface = tree(v2_source, "vllm/platforms/interface.py")
    validate = ast.unparse(function(interface, "validate_environ", "Platform"))
    assert f"if env == '{runner.V2_ENV}':" in validate and "if value != '1':" in validate
    assert "raise ValueError" in validate
    assert "validate_environ(" in v2_source.read("vllm/engine/arg_utils.py")
    # what select_runner does about it, before vLLM loads
    environ: dict = {}
    assert runner.select_runner(environ, line=lines.V2) == lines.V2 and environ == {}
    runner.select_runner({runner.V2_ENV: "1"}, line=lines.V2)  # vLLM only warns
    for value in ("0", "false"):
        with pytest.raises(ValueError, match=f"unset {runner.V2_ENV}") as error:
            runner.select_runner({runner.V2_ENV: value}, line=lines.V2)
        assert "\n" not in str(error.value)
