"""Which vLLM model runner runs the rule, and the start check that proves it (imports no vLLM).

vLLM 0.33 has two model runners. On a GPU it picks runner V2 whenever Triton is present
(`VllmConfig.use_v2_model_runner` in vllm/config/vllm.py, read from VLLM_USE_V2_MODEL_RUNNER
first). V2 samples drafts in its speculator with `gumbel_sample(..., apply_temperature=True)`:
the drafter's law is softmax(logits / T) with no top-k and no top-p, while the verifier's law has
both. Every rule's q is the processed law (T, then top-k, then top-p; the paper's code and the HF
engine), so on V2 acceptance and AL would be neither the paper's rule nor comparable with the HF
engine. The project patches the drafter's law on runner V1 only (cactus_bench.vllm.patches), so
`force_v1` pins V1 before vLLM reads its configuration, with one logged line, and refuses a user
who asked for V2. vLLM's CPU worker runs V1 anyway.

At engine start, `check_workers` asks every worker, through the worker extension below
(`vllm.LLM(worker_extension_cls=...)`, then `llm.collective_rpc`), which runner it built and
whether the rule and the drafter's law are installed in its process, and raises one line
otherwise; an engine of vLLM's own speculative sampling (acceptance=vllm) must have neither, and
on vLLM's CPU platform the expand fix (patches.py). The same call reports how often the bridge
fell back to vLLM's own sampler for a step without draft probabilities (near max_model_len;
cactus_bench.vllm.acceptance), and how often the patched drafter law and the bridge ran
(gpu-check asks again after decoding).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping, MutableMapping

LOG = logging.getLogger("cactus_bench.vllm")
V2_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V1_RUNNER_MODULE = "vllm.v1.worker.gpu_model_runner"  # V1's GPUModelRunner (CPU: a subclass)
V2_RUNNER_PACKAGE = "vllm.v1.worker.gpu."  # V2: vllm/v1/worker/gpu/model_runner.py
EXTENSION = "cactus_bench.vllm.runner.CactusWorkerExtension"
REPORT_METHOD = "cactus_bench_report"
FIX_V2 = f"unset {V2_ENV} (cactus_bench runs vLLM on model runner V1, where it patches the drafter)"


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


# ---- the start check -----------------------------------------------------------------------------
class CactusWorkerExtension:
    """Mixed into vLLM's worker class by `worker_extension_cls`: one read-only report method."""

    def cactus_bench_report(self) -> dict:
        return worker_report(self)


def worker_report(worker) -> dict:
    """What this worker process runs: the runner's class, and whether our patches are in."""
    from cactus_bench.vllm import acceptance, patches  # lazy: pulls in torch

    runner = getattr(worker, "model_runner", None)
    runner_class = f"{type(runner).__module__}.{type(runner).__qualname__}"
    v1_sampler = importlib.import_module(acceptance.PATCH_TARGETS[0])
    proposer = importlib.import_module(patches.PROPOSER_MODULE)
    return {
        "runner": runner_class,
        "v1": runner_is_v1(type(runner)),
        "rule": getattr(getattr(v1_sampler.rejection_sample, "cactus_rule", None), "name", None),
        "draft_law": getattr(proposer, patches.DRAFT_LAW_FUNCTION)
        is patches.sample_processed_drafts,
        # vLLM's CPU platform: whether expand_batch_to_tokens is checked (patches.py); else None
        "expand_fix": getattr(
            getattr(v1_sampler, "expand_batch_to_tokens", None), "cactus_checked", False
        )
        if acceptance._is_cpu_platform()
        else None,
        "draft_probs_fallbacks": acceptance.FALLBACKS["draft_probs_none"],
        # calls so far in this process: a report after decoding proves both patches ran
        "draft_law_calls": patches.CALLS["draft_law"],
        "bridge_calls": patches.CALLS["bridge"],
    }


def runner_is_v1(runner_class: type) -> bool:
    """True for V1's GPUModelRunner or a subclass (the CPU runner), False for V2's."""
    modules = [klass.__module__ for klass in runner_class.__mro__]
    return V1_RUNNER_MODULE in modules and not any(m.startswith(V2_RUNNER_PACKAGE) for m in modules)


def check_reports(reports: list[Mapping], rule_name: str | None, vllm_own: bool = False) -> None:
    """One line unless every worker runs V1 with `rule_name` and the drafter's law installed;
    `vllm_own` (vLLM's own speculative sampling, rule_name None): with neither installed, and
    with the expand fix where vLLM's CPU platform needs it. rule_name None alone: a verifier-only
    engine, which has no sampler to check."""
    if not reports:
        raise RuntimeError("vLLM answered the cactus_bench start check from no worker")
    for report in reports:
        if not report["v1"]:
            raise RuntimeError(
                f"vLLM built {report['runner']} (model runner V2), where cactus_bench does not "
                f"patch the drafter's law; {FIX_V2}"
            )
        if vllm_own:
            _check_vllm_own(report)
        if rule_name is None:
            continue
        if report["rule"] != rule_name or not report["draft_law"]:
            raise RuntimeError(
                f"cactus_bench's rule is not installed in a vLLM worker ({report['runner']}: "
                f"rule {report['rule']!r}, drafter law patched {report['draft_law']}); is "
                "cactus-bench installed in this environment (its vllm.general_plugins entry point)?"
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


def check_workers(llm, rule_name: str | None, vllm_own: bool = False) -> list[dict]:
    """Ask every worker of `llm` (built with `worker_extension_cls=EXTENSION`); raise or return."""
    reports = llm.collective_rpc(REPORT_METHOD)
    check_reports(reports, rule_name, vllm_own)
    return reports
