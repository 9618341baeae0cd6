"""What each line patches and relies on in vLLM, checked before an engine starts.

The version alone (cactus_bench.vllm.lines) cannot tell whether a release still has what a line
patches: an internal rename would either crash deep in the engine or leave a patch inert while
vLLM's own sampler runs. So `require_installed` reads the installed vLLM (modules imported,
signatures by `inspect`) and `require` the same FACTS from a source tree (a wheel read
member by member with `ast`, tests/test_vllm_conformance*.py): one check, two readers. A
mismatch is refused in one line naming it.

What is checked, per line:
  v1  the rule's target `rejection_sample` (parameters the V1 bridge takes, called by bare
      name where it is defined), the drafter's law `compute_probs_and_sample_next_token`
      (patches.py: its parameters, called by bare name), the CPU expand fix's target, and
      runner V1's `GPUModelRunner`;
  v2  `rejection_sample` (parameters the V2 bridge takes or handles, called by bare name in
      the runner's sampler module), the speculative-method registry, the standalone draft
      model's config and speculator with the hooks v2_speculator.py overrides, the drafting
      it relies on being temperature-only (no top-k / top-p in `sample_draft` or
      `gumbel_sample`: were vLLM to apply them, the processed law would apply them twice),
      runner V2's `GPUModelRunner` with runner V1's module gone;
  both `EngineArgs.generation_config` (engines.py passes "vllm", so the model's
      generation_config.json cannot change the run's sampling).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass

from cactus_bench.vllm import lines

SPEC = "vllm.v1.worker.gpu.spec_decode"


@dataclass(frozen=True)
class Fact:
    """One thing a line needs: `qualname` in `module` exists; with `params`, its parameters
    start with them; with `within`, every parameter is one of them; `called_in`: a module that
    calls it by bare name (so a patched module global takes effect); `lacks`: words its source
    must not contain."""

    module: str
    qualname: str
    why: str
    params: tuple[str, ...] = ()
    within: frozenset[str] | None = None
    called_in: str | None = None
    lacks: tuple[str, ...] = ()
    absent: bool = False  # the module must be gone


def _bridge_names(line: str) -> frozenset[str]:
    """Every parameter the line's bridge reads or deliberately handles (imports torch)."""
    from cactus_bench.vllm import bridge, bridge_v2  # lazy: torch

    if line == lines.V1:
        names = set(inspect.signature(bridge.rejection_sample_v1).parameters)
        names.add("target_probs")  # older releases' 6th argument (acceptance.bridge_for)
    else:
        names = set(inspect.signature(bridge_v2.rejection_sample_v2).parameters)
        names |= {*bridge_v2.V2_IGNORED, *bridge_v2.V2_WATERMARK}
    return frozenset(names - {"rule", "options", "unknown", "target_is_logits"})


def facts(line: str) -> tuple[Fact, ...]:
    both = (
        Fact("vllm.engine.arg_utils", "EngineArgs.generation_config", "generation_config='vllm'"),
    )
    if line == lines.V1:
        sampler = "vllm.v1.sample.rejection_sampler"
        return both + (
            Fact(
                sampler,
                "rejection_sample",
                "the rule replaces it",
                ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens"),
                _bridge_names(line),
                called_in=sampler,
            ),
            Fact(
                "vllm.v1.spec_decode.llm_base_proposer",
                "compute_probs_and_sample_next_token",
                "the drafter's processed law replaces it",
                ("logits", "sampling_metadata"),
                frozenset({"logits", "sampling_metadata", "use_fp64_gumbel"}),
                called_in="vllm.v1.spec_decode.llm_base_proposer",
            ),
            Fact(sampler, "expand_batch_to_tokens", "the CPU expand fix", ("x", "cu_num_tokens")),
            Fact("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "model runner V1"),
        )
    draft = f"{SPEC}.speculator"
    return both + (
        Fact(
            f"{SPEC}.rejection_sampler_utils",
            "rejection_sample",
            "the rule replaces it",
            ("target_logits", "draft_logits_cache", "draft_sampled", "cu_num_logits"),
            _bridge_names(line),
            called_in=f"{SPEC}.rejection_sampler",
        ),
        Fact(
            f"{SPEC}.speculator_config",
            "register_speculative_method",
            "the drafter's law is a registered method",
            ("name", "config_cls"),
        ),
        Fact(f"{SPEC}.standalone_ar.config", "StandaloneARSpeculatorConfig", "its base config"),
        Fact(
            f"{SPEC}.standalone_ar.speculator",
            "StandaloneARSpeculator.__init__",
            "the speculator v2_speculator.py extends",
            ("self", "vllm_config", "device"),
        ),
        Fact(
            draft,
            "DraftModelSpeculator.compute_draft_logits",
            "the drafter's law masks what it returns",
            ("self", "hidden_states", "spec_step_idx"),
        ),
        Fact(
            draft,
            "DraftModelSpeculator.sample_draft",
            "temperature-only drafting, which the processed law completes",
            ("self", "hidden_states", "sample_src_positions", "idx_mapping"),
            lacks=("top_k", "top_p"),
        ),
        Fact(
            draft,
            "DraftModelSpeculator.prepare_propose",
            "top-k / top-p are copied there",
            ("self", "input_batch", "num_sampled", "num_rejected", "sampler"),
        ),
        Fact(
            "vllm.v1.worker.gpu.sample.gumbel",
            "gumbel_sample",
            "temperature-only draft sampling",
            ("logits",),
            lacks=("top_k", "top_p"),
        ),
        Fact("vllm.v1.worker.gpu.model_runner", "GPUModelRunner", "model runner V2"),
        Fact("vllm.v1.worker.gpu_model_runner", "", "runner V1 gone", absent=True),
    )


# ---- readers -------------------------------------------------------------------------------------
class Imported:
    """The vLLM installed here: modules imported, parameters by `inspect`."""

    def _object(self, module: str, qualname: str):
        try:
            found = importlib.import_module(module)
        except ImportError:
            return None
        for part in filter(None, qualname.split(".")):
            found = getattr(found, part, None)
            if found is None:
                return None
        # what vLLM defined, not a replacement this process installed (acceptance, patches)
        from cactus_bench.vllm.patches import ORIGINALS  # lazy: torch

        found = ORIGINALS.get((module, qualname), found)
        return getattr(found, "cactus_original", None) or getattr(found, "__wrapped__", found)

    def has(self, module: str, qualname: str) -> bool:
        return self._object(module, qualname) is not None

    def parameters(self, module: str, qualname: str) -> list[str]:
        return list(inspect.signature(self._object(module, qualname)).parameters)

    def source(self, module: str, qualname: str = "") -> str:
        return inspect.getsource(self._object(module, qualname))


class SourceTree:
    """A vLLM source tree as {path: text} (a wheel's members): parsed by `ast`, nothing run."""

    def __init__(self, read, names):
        self.read, self.names = read, set(names)

    def _tree(self, module: str):
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            if path in self.names:
                return ast.parse(self.read(path))
        return None

    def _node(self, module: str, qualname: str):
        node = self._tree(module)
        for part in filter(None, qualname.split(".")):
            if node is None:
                return None
            node = next((n for n in node.body if _name(n) == part), None)
        return node

    def has(self, module: str, qualname: str) -> bool:
        return self._node(module, qualname) is not None

    def parameters(self, module: str, qualname: str) -> list[str]:
        args = self._node(module, qualname).args
        return [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]

    def source(self, module: str, qualname: str = "") -> str:
        return ast.unparse(self._node(module, qualname))


def _name(node) -> str | None:
    if isinstance(node, ast.ClassDef | ast.FunctionDef):
        return node.name
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def _bare_call(source: str, name: str) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
        for n in ast.walk(ast.parse(source))
    )


# ---- the check -----------------------------------------------------------------------------------
def mismatches(reader, line: str) -> list[str]:
    """Every fact of `line` the reader's vLLM breaks, one phrase each."""
    found = []
    for fact in facts(line):
        where = f"{fact.module}.{fact.qualname}".rstrip(".")
        if fact.absent:
            if reader.has(fact.module, ""):
                found.append(f"{where} is still there ({fact.why})")
            continue
        if not reader.has(fact.module, fact.qualname):
            found.append(f"no {where} ({fact.why})")
            continue
        if fact.params or fact.within is not None:
            names = reader.parameters(fact.module, fact.qualname)
            if names[: len(fact.params)] != list(fact.params):
                found.append(
                    f"{where} takes ({', '.join(names)}), not ({', '.join(fact.params)}, ...)"
                )
            unknown = sorted(set(names) - fact.within) if fact.within is not None else []
            if unknown:
                found.append(f"{where} has parameters the bridge does not read: {unknown}")
        if fact.called_in and not _bare_call(reader.source(fact.called_in), fact.qualname):
            found.append(f"{fact.called_in} no longer calls {fact.qualname} by name")
        if fact.lacks:
            text = reader.source(fact.module, fact.qualname)
            if any(word in text for word in fact.lacks):
                found.append(f"{where} reads {'/'.join(fact.lacks)} (drafts would be cut twice)")
    return found


def require(reader, line: str, label: str) -> None:
    """UnsupportedVllm (one line) unless `reader`'s vLLM has everything `line` patches."""
    found = mismatches(reader, line)
    if found:
        raise lines.UnsupportedVllm(
            f"{label} does not match what cactus_bench's {line} line patches: "
            f"{'; '.join(found)}; supported: {lines.SUPPORTED}"
        )


def require_installed(line: str | None = None) -> tuple[str, str]:
    """The installed vLLM checked against its line: -> (its "distribution version", line)."""
    distribution, version = lines.installed() or ("vllm", "?")
    line = line or lines.installed_line()
    label = f"{distribution} {version}"
    require(Imported(), line, label)
    return label, line
