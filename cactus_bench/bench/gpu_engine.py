"""The engine end to end on one device, and what actually ran there (gpu-bench's engine stage).

`engine_costs` decodes random prompts through `generate_batch` per (arm, m, batch): the
verifier alone, SpS, Cactus. Each row says what the run cost (tokens/s, the mean decode step)
and what ran, as the engine reports it (`what_ran`): graph replays, eager forward calls,
whether a capture failed, and the mean draft / verify / rule / other milliseconds a step (timed
by the engine with device events). A setting says what was asked for, not what ran: an engine
whose capture failed runs eager, so the row never takes "graphs on" from the setting. An engine
without `device_stats()` leaves those cells empty and says so in `stats_note`; so does a run
whose rule ran inside its captured verify graph (`rule_ms` empty: `verify_ms` holds it).
"""

from __future__ import annotations

import statistics
import time

import torch

from cactus_bench.engine import AutoregressiveDecoder, BatchRequest, SpeculativeDecoder
from cactus_bench.engine.sampling import PAPER_SAMPLING
from cactus_bench.samplers import make_sampler

# What ran, per run: device_stats()'s counts and its phase means (ms a decode step).
PHASES = ("draft", "verify", "rule", "other")
STATS_COLUMNS = ("graph_replays", "eager_forwards", "capture_failed") + tuple(
    f"{phase}_ms" for phase in PHASES
)
NOT_REPORTED = "not reported by this engine"
RULE_IN_VERIFY = "rule inside the verify graph: verify_ms includes it"


def what_ran(decoder) -> dict:
    """The decoder's `device_stats()` of its last run as row cells: graph_replays (int),
    eager_forwards (int), capture_failed (bool), and the phase means draft_ms / verify_ms /
    rule_ms / other_ms; every cell empty, with `stats_note`, where the engine has no
    `device_stats`."""
    stats = getattr(decoder, "device_stats", None)
    if stats is None:
        return {**dict.fromkeys(STATS_COLUMNS), "stats_note": NOT_REPORTED}
    reported = stats()
    phases = reported["phase_ms"]
    return {
        "graph_replays": int(reported["graph_replays"]),
        "eager_forwards": int(reported["eager_forwards"]),
        "capture_failed": bool(reported["capture_failed"]),
        **{f"{phase}_ms": phases.get(phase) for phase in PHASES},
        "stats_note": RULE_IN_VERIFY if phases.get("rule", 0.0) is None else "",
    }


def engine_costs(drafter, verifier, tokenizer, device, arms, context: int, new_tokens: int):
    """Rows of the engine end to end per (arm, m, batch) of `arms` [(arm, m, batches)] (arm:
    "verifier", "sps" or "cactus"; m 0 for the verifier): tokens/s, mean step, capture seconds
    of the warm-up run (the timed run reuses its graphs), and what ran (`what_ran`).
    Requests are `batch` random prompts of `context` tokens each, decoded at the paper's law."""
    vocab = verifier.config.vocab_size
    generator = torch.Generator().manual_seed(1)
    out = []
    for arm, m, batches in arms:
        decoder = _decoder(arm, m, drafter, verifier, tokenizer, vocab, device)
        for batch in batches:
            prompts = torch.randint(vocab, (batch, context), generator=generator).tolist()
            requests = [BatchRequest(p, new_tokens, seed=i) for i, p in enumerate(prompts)]
            # Warm-up on the same slots and cache size: kernels, allocator, graph captures
            # (kept with the caches, so the timed run replays them and captures nothing).
            warm = [BatchRequest(p, 4, seed=i) for i, p in enumerate(prompts)]
            decoder.generate_batch(warm, batch=batch)
            capture_s = decoder.graph_capture_s
            start = time.perf_counter()
            records = decoder.generate_batch(requests, batch=batch)
            wall = time.perf_counter() - start
            steps = [s for s in decoder.step_log if s.kind == "decode"]
            tokens = sum(len(r.output_ids) for r in records)
            accepted = [sum(step.accepted) / max(1, len(step.accepted)) for step in steps]
            out.append(
                {
                    "arm": arm,
                    "batch": batch,
                    "m": m,
                    "tokens": tokens,
                    "wall_s": wall,
                    "tokens_per_s": tokens / wall,
                    "mean_step_s": statistics.mean(_step_s(steps)),
                    "accepted_per_step": statistics.mean(accepted),
                    "capture_s": capture_s,
                    "recaptured_s": decoder.graph_capture_s,  # 0: the timed run replayed only
                    **what_ran(decoder),
                    "graphs_requested": decoder.cuda_graphs,  # the setting, not what ran
                }
            )
    return out


def _decoder(arm: str, m: int, drafter, verifier, tokenizer, vocab: int, device):
    if arm == "verifier":
        return AutoregressiveDecoder(verifier, tokenizer, PAPER_SAMPLING, [vocab], device)
    params = {"delta": 1.0} if arm == "cactus" else {}
    rule = make_sampler(arm, **params)
    pair = (drafter, verifier, tokenizer)
    return SpeculativeDecoder(*pair, rule, m, PAPER_SAMPLING, [vocab], device)


def _step_s(steps) -> list[float]:
    """Each decode step's seconds: its draft, verify and rule phases (each timed on a clock that
    waits for the device)."""
    return [step.draft_s + step.verify_s + step.rule_s for step in steps]
