"""The batched bridge and drafter law against vLLM's own rejection sampler and draft sampling.

    .venv-vllm/bin/python scripts/bench_bridge.py   # make bench-bridge

One process of the vLLM environment, one thread, the same inputs for both sides:
  bridge       cactus_bench.vllm.bridge.rejection_sample_v1 (rule sps, then cactus) against
               vllm.v1.sample.rejection_sampler.rejection_sample (its CPU kernels registered),
               given B requests of m drafts each: drafter probabilities [B m, V] and the
               verifier's processed logits [B m, V], both at the paper's sampling (top-k, top-p,
               temperature of cactus_bench.engine.sampling.PAPER_SAMPLING)
  draft_law    cactus_bench.vllm.patches.sample_processed_drafts against vLLM's
               compute_probs_and_sample_next_token, on one drafter step's logits [B, V]
               (each call gets a fresh copy: vLLM divides the logits in place)
The two sides alternate call by call, so drifts in machine speed hit both alike; CPU time of
the process (median and quartiles of --repeats calls after a warm-up). The target the rows are
read against: ours <= TARGET_RATIO x vLLM's median. Writes results/bench/bridge.csv (replaced:
one run, one machine).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path
from types import SimpleNamespace

import torch

from cactus_bench.bench.timing import spread
from cactus_bench.engine.sampling import PAPER_SAMPLING

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 151_936  # Qwen's vocabulary, the largest of the paper's pairs
BATCHES = (1, 8, 32, 64)
DRAFTS = (2, 20)
TARGET_RATIO = 1.5
FIELDS = [
    "timestamp",
    "git_sha",
    "git_dirty",
    "cpu",
    "threads",
    "part",
    "rule",
    "vocab",
    "batch",
    "m",
    "ours_ms",
    "ours_q25",
    "ours_q75",
    "vllm_ms",
    "vllm_q25",
    "vllm_q75",
    "ratio",
    "target_met",
]


def metadata(batch: int, device) -> SimpleNamespace:
    """vLLM's SamplingMetadata fields the two samplers read, at the paper's sampling."""
    full = lambda value: torch.full((batch,), value, device=device)  # noqa: E731
    return SimpleNamespace(
        all_greedy=False,
        all_random=True,
        temperature=full(float(PAPER_SAMPLING.temperature)),
        top_k=full(int(PAPER_SAMPLING.top_k)),
        top_p=full(float(PAPER_SAMPLING.top_p)),
        generators={},
    )


def processed_logits(logits: torch.Tensor) -> torch.Tensor:
    """Temperature, top-k, top-p as vLLM hands them to rejection_sample (-inf elsewhere)."""
    from cactus_bench.engine.sampling import process_logits

    return process_logits(logits, PAPER_SAMPLING).log()


def alternate(calls: dict, repeats: int, fresh=None) -> dict[str, list[float]]:
    """CPU ms of each call, the calls alternating; fresh() builds each call's argument."""
    times = {name: [] for name in calls}
    for repeat in range(repeats + 2):  # two warm-up rounds
        for name, call in calls.items():
            argument = fresh() if fresh else None
            start = time.process_time()
            call(argument)
            elapsed = 1e3 * (time.process_time() - start)
            if repeat >= 2:
                times[name].append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--out", type=Path, default=ROOT / "results/bench/bridge.csv")
    args = parser.parse_args()
    try:
        from vllm.platforms import current_platform
        from vllm.v1.sample import rejection_sampler
        from vllm.v1.spec_decode import llm_base_proposer
    except ImportError:
        raise SystemExit(
            "needs vLLM: run it with .venv-vllm/bin/python (make setup-vllm)"
        ) from None

    from cactus_bench.engine.cpu_kernels import cpu_info
    from cactus_bench.samplers import make_sampler
    from cactus_bench.store.metadata import git_state
    from cactus_bench.vllm import patches
    from cactus_bench.vllm.bridge import rejection_sample_v1

    torch.set_num_threads(1)
    if current_platform.is_cpu():
        current_platform.register_triton_kernel_overrides()  # vLLM's CPU kernels, as its worker
    theirs_reject = rejection_sampler.rejection_sample
    theirs_draft = llm_base_proposer.compute_probs_and_sample_next_token
    sha, dirty = git_state()
    stamp = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git_sha": sha,
        "git_dirty": dirty,
        "cpu": cpu_info().model,
        "threads": torch.get_num_threads(),
        "vocab": args.vocab,
    }
    rows = []

    def add(part, rule, batch, m, times):
        ours, vllm = spread(times["ours"]), spread(times["vllm"])
        ratio = ours[0] / vllm[0]
        rows.append(
            {
                **stamp,
                "part": part,
                "rule": rule,
                "batch": batch,
                "m": m,
                **dict(zip(("ours_ms", "ours_q25", "ours_q75"), ours, strict=True)),
                **dict(zip(("vllm_ms", "vllm_q25", "vllm_q75"), vllm, strict=True)),
                "ratio": ratio,
                "target_met": ratio <= TARGET_RATIO,
            }
        )
        print(
            f"{part:10} {rule:7} B={batch:3} m={m:3}: ours {ours[0]:9.2f} ms, "
            f"vLLM {vllm[0]:9.2f} ms, ratio {ratio:5.2f}",
            flush=True,
        )

    generator = torch.Generator().manual_seed(0)
    for batch in BATCHES:
        meta = metadata(batch, "cpu")
        logits = torch.randn(batch, args.vocab, generator=generator) * 3
        calls = {
            "ours": lambda x, meta=meta: patches.sample_processed_drafts(x, meta),
            "vllm": lambda x, meta=meta: theirs_draft(x, meta),
        }
        times = alternate(calls, args.repeats, fresh=logits.clone)
        add("draft_law", "-", batch, 1, times)

    for m in DRAFTS:
        for batch in BATCHES:
            tokens = batch * m
            draft_logits = torch.randn(tokens, args.vocab, generator=generator) * 3
            draft_probs = processed_logits(draft_logits).exp()  # [B m, V], top-k zeros
            del draft_logits
            target = processed_logits(torch.randn(tokens, args.vocab, generator=generator) * 3)
            ids = torch.multinomial(draft_probs, 1, generator=generator).view(-1)
            counts = [m] * batch
            cu = torch.tensor(counts).cumsum(0).to(torch.int32)
            bonus = torch.randint(args.vocab, (batch, 1), generator=generator)
            layout = (ids, counts, m, cu, draft_probs, target, bonus, metadata(batch, "cpu"))
            for name in ("sps", "cactus"):
                rule = make_sampler(name, **({"delta": 1.0} if name == "cactus" else {}))
                calls = {
                    "ours": lambda _, r=rule, a=layout: rejection_sample_v1(*a, rule=r),
                    "vllm": lambda _, a=layout: theirs_reject(*a),
                }
                add("bridge", name, batch, m, alternate(calls, args.repeats))
            del draft_probs, target, layout

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()})
    worst = max(rows, key=lambda row: row["ratio"])
    print(
        f"wrote {len(rows)} rows to {args.out}; worst ratio {worst['ratio']:.2f} "
        f"({worst['part']} B={worst['batch']} m={worst['m']}); median ratio "
        f"{statistics.median(row['ratio'] for row in rows):.2f}; target <= {TARGET_RATIO}"
    )


if __name__ == "__main__":
    main()
