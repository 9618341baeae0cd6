"""FABRICATED results for the report tests: tests/fixtures/results_intervals.csv.

Nothing here was measured. Every row is built from synthetic per-request records and hand-chosen
per-prompt scores, through the same functions a run uses (summarise, per_prompt_columns,
ResultStore), so the CSV has exactly the columns and intervals a real run writes. The rows say
so themselves: experiment "FABRICATED_for_tests", device "FABRICATED test fixture (no hardware)".
Regenerate with `python tests/intervals_fixture.py` (deterministic: fixed seeds).

GSM8K, 60 prompts, 0/1 scores (McNemar's exact test), one seed per method except Cactus δ = 1:
  Verifier        right on prompts 0-44                      45 / 60
  SpS             right on 0-43 and 45                        45 / 60; vs verifier 1 : 1
  TAS             right on 0-39 and 50-51                     42 / 60; vs verifier 2 : 5
  Cactus δ = 0.5  right on 0-41                               42 / 60; vs SpS and verifier 0 : 3
  Cactus δ = 1    seed 1: right on 0-29; seed 2: right on 0-31 (cell: fractional, sign flips)
Demo, 20 prompts, repeats = 2 (scores 0, 0.5, 1: the permutation test), Verifier / SpS / Cactus δ=1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "results_intervals.csv"
DEVICE = "FABRICATED test fixture (no hardware)"
M = 4


def records(n_prompts: int, accept: float, seed: int, repeats: int = 1, speculative=True):
    """Synthetic records, repeat after repeat: prompt i has 20 + (7 i mod 30) tokens to write;
    each step accepts Binomial(m, accept) drafts; a step costs ~1 (spec) or ~0.8 (baseline) s
    per 10 steps, with 5 % noise, so long prompts are slow for both arms (pairing matters)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(repeats):
        for prompt in range(n_prompts):
            length = 20 + (7 * prompt) % 30
            accepted, emitted = [], []
            while sum(emitted) < length:
                a = int(rng.binomial(M, accept)) if speculative else 0
                accepted.append(a)
                emitted.append(a + 1)
            steps = len(accepted)
            seconds = (0.1 if speculative else 0.08) * steps * (1 + 0.05 * rng.standard_normal())
            out.append(
                {
                    "prompt_ids": [prompt, 1, 2],
                    "num_draft_tokens": M if speculative else 0,
                    "drafted_per_step": [M if speculative else 0] * steps,
                    "accepted_per_step": accepted,
                    "emitted_per_step": emitted,
                    "output_ids": list(range(sum(emitted))),
                    "draft_time_s": 0.0,
                    "verify_time_s": seconds,
                    "sampler_time_s": 0.0,
                    "total_time_s": seconds,
                }
            )
    return out


def right_on(n: int, *spans: tuple[int, int]) -> list[float]:
    scores = [0.0] * n
    for first, last in spans:
        for i in range(first, last + 1):
            scores[i] = 1.0
    return scores


GSM8K = {  # (sampler, delta, seed, accept, scores)
    ("verifier", None, 1): (0.0, right_on(60, (0, 44))),
    ("sps", None, 1): (0.3, right_on(60, (0, 43), (45, 45))),
    ("tas", None, 1): (0.4, right_on(60, (0, 39), (50, 51))),
    ("cactus", 0.5, 1): (0.45, right_on(60, (0, 41))),
    ("cactus", 1.0, 1): (0.5, right_on(60, (0, 29))),
    ("cactus", 1.0, 2): (0.5, right_on(60, (0, 31))),
}
DEMO = {  # repeats = 2: per-prompt means over the two decodes
    ("verifier", None, 1): (0.0, [1.0] * 12 + [0.5] * 4 + [0.0] * 4),
    ("sps", None, 1): (0.3, [1.0] * 11 + [0.5] * 6 + [0.0] * 3),
    ("cactus", 1.0, 1): (0.5, [1.0] * 4 + [0.5] * 6 + [0.0] * 10),
}


def fabricated_rows() -> list[dict]:
    from cactus_bench.store import config_hash, summarise
    from cactus_bench.store.intervals import per_prompt_columns

    rows = []
    for task, table, repeats in (("gsm8k", GSM8K, 1), ("demo", DEMO, 2)):
        for (sampler, delta, seed), (accept, scores) in table.items():
            speculative = sampler != "verifier"
            n = len(scores)
            spec = records(n, accept, 100 * seed + len(rows), repeats, speculative)
            base = records(n, 0.0, 7 * seed, repeats, False) if speculative else None
            identity = {"task": task, "sampler": sampler, "delta": delta, "seed": seed}
            rows.append(
                {
                    "run_id": f"fabricated-{len(rows)}",
                    "config_hash": config_hash(identity),
                    "experiment": "FABRICATED_for_tests",
                    "model_pair": "fabricated_pair",
                    "drafter_id": "FABRICATED-drafter" if speculative else None,
                    "verifier_id": "FABRICATED-verifier",
                    "backend": "hf",
                    "task": task,
                    "n_prompts": n,
                    "sampler": sampler,
                    "delta": delta,
                    "threshold": 0.09 if sampler == "tas" else None,
                    "alpha": 0.3 if sampler == "tas" else None,
                    "m": M if speculative else None,
                    "temperature": 0.6,
                    "top_p": 0.95,
                    "top_k": 20,
                    "seed": seed,
                    "repeats": repeats,
                    "max_new_tokens": 64,
                    "score_name": "exact_match,strict-match"
                    if task == "gsm8k"
                    else "prompt_level_strict_acc,none",
                    "score": float(np.mean(scores)),
                    **summarise(spec, base),
                    **per_prompt_columns(spec, base, scores, seed=seed),
                    "baseline_mode": "interleave" if speculative else "none",
                    "device_name": DEVICE,
                    "status": "ok",
                }
            )
    return rows


def write_fixture(path: Path = FIXTURE) -> Path:
    from cactus_bench.store import ResultStore

    path.unlink(missing_ok=True)
    store = ResultStore(path)
    for row in fabricated_rows():
        store.append(row)
    Path(str(path) + ".lock").unlink(missing_ok=True)
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    print(f"wrote {write_fixture()}")
