"""The GPU check's vLLM worker, run with .venv-vllm's python (vLLM lives in its own environment)
by scripts/gpu_check_vllm.py; vllm_check.py writes the job and judges the answer.

One speculative engine per job on the embedded verifier drafting for itself (drafter =
verifier), the job's rule installed through the plugin, runner V1, CUDA graphs on or off as the
job says (`enforce_eager`). The job's `parts` say what it runs:
  runners    VLLM_USE_V2_MODEL_RUNNER=1 must be refused in one line before anything loads (V2's
             drafter ignores top-k / top-p), and the engine must start on V1 with the rule;
  greedy     vLLM's greedy speculative tokens for the job's prompts (the check compares them
             with the HF engine's greedy autoregressive tokens, up to near-ties);
  self_draft at the paper's sampling a drafter that is the verifier: with the patched drafter
             law p = q and SpS accepts (nearly) every draft; vLLM's own temperature-only law
             would not (its drafts leave q's top-k / top-p support);
  sampler    vLLM's own V1 `rejection_sample` and this project's bridge with sps on the same
             inputs at V = 151,936 (one draft per row, p and q on a few tokens spread over the
             whole vocabulary): the counts of the first emitted token (the check tests both
             against q, sps's exact law) and the time of each call.
Every job ends with the workers' reports after decoding: how often the patched drafter law and
the bridge ran in each worker process (both must be > 0 where drafts were sampled).
Imports only what .venv-vllm has: the package's torch-level layers and vLLM, nothing else.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

from cactus_bench.vllm.runner import REPORT_METHOD, V2_ENV, force_v1


def runner_refusal() -> str:
    environ = {V2_ENV: "1"}
    try:
        force_v1(environ)
    except ValueError as error:
        return str(error)
    return ""


def sampler_law(job: dict, rejection_sample, device) -> dict:
    """First emitted tokens of vLLM's sampler (`rejection_sample`) and of the sps bridge."""
    import torch  # lazy: keeps torch out of the command's start-up

    from cactus_bench.samplers import make_sampler  # lazy: pulls in torch
    from cactus_bench.vllm.bridge import rejection_sample_v1  # lazy: pulls in torch

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
    samplers = {
        "vllm": rejection_sample,
        "cactus_bench": lambda *args: rejection_sample_v1(*args, rule=rule),
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
        for name, sample in samplers.items():
            synchronize(device)
            start = time.perf_counter()
            out = sample(*args)
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
    result = {"v2_refusal": runner_refusal()} if "runners" in parts else {}
    os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
    import torch  # lazy: after the environment above is set for vLLM
    import vllm  # lazy: as torch
    from transformers import AutoTokenizer  # lazy: as torch

    from cactus_bench.engine import SamplingParams  # lazy: pulls in torch
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
        rule=(name, params),
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
        from vllm.platforms import current_platform  # lazy: vLLM is installed only in .venv-vllm
        from vllm.v1.sample import rejection_sampler  # lazy: vLLM is installed only in .venv-vllm

        if current_platform.is_cpu():  # vLLM's worker does this in its own process
            current_platform.register_triton_kernel_overrides()
        original = getattr(rejection_sampler.rejection_sample, "cactus_original", None)
        original = original or rejection_sampler.rejection_sample
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        result["sampler"] = sampler_law(job, original, device)
    return result
