"""One frontier measurement: contexts -> p_t, q_t -> exact statistics -> CSV rows and figures.

    from cactus_bench.frontier import FrontierConf, run_frontier
    outcome = run_frontier(FrontierConf(pair="smollm2_135m", data_dir="../shared/data"))
    outcome.csv_path      # <out_dir>/<pair>.csv (long format, rows.py); <pair>.json: metadata

Phases (each with a progress bar and its wall time recorded in the JSON): load the pair, sample or
reuse the contexts (contexts.py), teacher-force and compute every arm's exact statistics chunk by
chunk (teacher_forcing.py, stats.py), aggregate with bootstrap intervals and predicted AL (rows.py),
optionally re-decode sampled positions with the engine (engine_check.py), draw the figures.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from cactus_bench.engine import SamplingParams
from cactus_bench.frontier.aggregate import bootstrap_weights
from cactus_bench.frontier.arms import build_arms
from cactus_bench.frontier.conf import FrontierConf
from cactus_bench.frontier.contexts import build_contexts, load_prompt_texts
from cactus_bench.frontier.definitions import write_definitions
from cactus_bench.frontier.distribution import (
    distribution_rows,
    overshoot_cell_rows,
    paired_rows,
    theorem3_findings,
)
from cactus_bench.frontier.engine_check import engine_check_arms, engine_check_rows
from cactus_bench.frontier.matched import matched_rows
from cactus_bench.frontier.plots import make_figures
from cactus_bench.frontier.rows import COLUMNS, stop_rows, summary_rows
from cactus_bench.frontier.stats import (
    STATISTICS,
    chunk_statistics,
    entropy,
    grid_size,
    marked_masses,
    token_marks,
)
from cactus_bench.frontier.teacher_forcing import iter_chunks
from cactus_bench.models import load_pair
from cactus_bench.models.loading import resolve_device
from cactus_bench.store.metadata import device_name, git_state
from cactus_bench.tasks.stop_set import stop_set


@dataclass
class FrontierOutcome:
    csv_path: Path
    num_positions: int
    num_sequences: int
    timings: dict[str, float]
    figures: list[Path] = field(default_factory=list)
    highlights: list[str] = field(default_factory=list)


def run_frontier(conf: FrontierConf) -> FrontierOutcome:
    conf.check()
    if conf.threads is not None:
        torch.set_num_threads(conf.threads)
    torch.manual_seed(conf.seed)
    arms = build_arms(conf)
    check_arms = engine_check_arms(conf, arms)
    # Wall time and this process's CPU time per phase: on a shared machine the CPU time is the
    # cost of the work itself (one thread: CPU time <= wall time, equal when nothing competes).
    timings: dict[str, float] = {}
    clock, cpu = time.perf_counter(), time.process_time()
    start, cpu_start = clock, cpu

    def lap(name: str) -> None:
        nonlocal clock, cpu
        now, cpu_now = time.perf_counter(), time.process_time()
        timings[f"{name}_s"] = round(now - clock, 2)
        timings[f"{name}_cpu_s"] = round(cpu_now - cpu, 2)
        clock, cpu = now, cpu_now

    load_prompt_texts(conf)  # a missing data folder fails before any model loads
    device = resolve_device(conf.device)
    pair = load_pair(conf.pair, device=device, dtype=conf.dtype)
    lap("load_pair")
    out_dir = Path(conf.out_dir)
    contexts = build_contexts(conf, pair, Path(conf.cache_dir or out_dir / "contexts"), device)
    lap("contexts")
    sampling = SamplingParams(conf.temperature, conf.top_p, conf.top_k)
    measured = measure_positions(conf, pair, contexts, arms, sampling)
    lap("statistics")
    weights = bootstrap_weights(len(measured["lengths"]), conf.bootstrap, conf.seed)
    rows = summary_rows(
        conf,
        arms,
        measured["stats"],
        measured["entropy"],
        measured["sequence"],
        measured["lengths"],
        weights,
        measured["sources"],
        conf.progress,
    )
    per_position = (measured["stats"], measured["sequence"], measured["lengths"], weights)
    rows += distribution_rows(arms, *per_position)
    rows += paired_rows(arms, *per_position)
    rows += matched_rows(arms, *per_position)
    rows += overshoot_cell_rows(arms, measured["cells"])
    rows += stop_rows(
        arms, measured["stats"], measured["verifier"], measured["at_stop"], *per_position[1:]
    )
    lap("aggregate")
    if conf.engine_check:
        rows += engine_check_rows(conf, pair, contexts, arms, check_arms, measured, sampling)
        lap("engine_check")
    frame = pd.DataFrame(rows)
    frame.insert(0, "prompt_set", conf.prompt_set_name())
    frame.insert(0, "pair", conf.pair)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / conf.csv_name()
    frame[list(COLUMNS)].to_csv(csv_path, index=False, float_format="%.6g")
    write_definitions(csv_path)
    timings["total_s"] = round(time.perf_counter() - start, 2)
    timings["total_cpu_s"] = round(time.process_time() - cpu_start, 2)
    positions, sequences = int(measured["lengths"].sum()), len(measured["lengths"])
    _write_metadata(csv_path.with_suffix(".json"), conf, pair, timings, positions, sequences)
    outcome = FrontierOutcome(csv_path, positions, sequences, timings)
    if conf.figures:
        outcome.figures = make_figures(csv_path, out_dir / "figures")
    outcome.highlights = highlights(frame) + theorem3_findings(rows)
    return outcome


def measure_positions(conf, pair, contexts, arms, sampling) -> dict:
    """Per-position statistics of every arm: {"stats": {name: [A, N]}, "entropy": [N],
    "sequence": [N], "lengths": [S], "sources": [S], "cells": [A, Qb, Gb, 2] overshoot cells,
    "verifier": {"stop_mass", "out_of_head", "entropy": [N]} q's own, "at_stop": [N] bool (the
    verifier's token is in the pair's stop set)} over the sequences with a position."""
    stop_ids = stop_set(pair.tokenizer, pair.chat_template_kwargs).stop_ids
    kept = [i for i, tokens in enumerate(contexts.tokens) if tokens]
    lengths = torch.tensor([len(contexts.tokens[i]) for i in kept], dtype=torch.long)
    renumber = {original: new for new, original in enumerate(kept)}
    total = int(lengths.sum())
    stats = {name: torch.empty(len(arms), total, dtype=torch.float64) for name in STATISTICS}
    entropies = torch.empty(total, dtype=torch.float64)
    verifier = {
        name: torch.empty(total, dtype=torch.float64) for name in ("stop_mass", "out_of_head")
    }
    sequence = torch.empty(total, dtype=torch.long)
    unscaled = any(arm.reads_unscaled for arm in arms)  # p̄, q̄ for the cascades, FSD, BiLD
    chunks = iter_chunks(
        pair,
        contexts,
        sampling,
        conf.chunk_elements,
        grid_size(arms),
        conf.progress,
        unscaled,
        stop_ids,
    )
    cells = 0
    for chunk in chunks:
        columns = slice(chunk.offset, chunk.offset + chunk.p.shape[0])
        values, chunk_cells = chunk_statistics(
            chunk.p, chunk.q, arms, conf.chunk_elements, chunk.full, chunk.stop, conf.head_fraction
        )
        for name, value in values.items():
            stats[name][:, columns] = value
        cells = cells + chunk_cells
        entropies[columns] = entropy(chunk.q).cpu()
        marks = token_marks(chunk.q, chunk.stop, conf.head_fraction)
        for name, value in marked_masses(chunk.q, marks).items():
            verifier[name][columns] = value.to("cpu", torch.float64)
        sequence[columns] = torch.tensor([renumber[int(s)] for s in chunk.sequence])
    sources = [contexts.sources[i] for i in kept]
    answers = torch.tensor([token for i in kept for token in contexts.tokens[i]])
    return {
        "verifier": {**verifier, "entropy": entropies},
        "at_stop": torch.isin(answers, torch.tensor(stop_ids)),
        "stats": stats,
        "entropy": entropies,
        "sequence": sequence,
        "lengths": lengths,
        "sources": sources,
        "cells": cells,
    }


def _write_metadata(path: Path, conf, pair, timings, positions, sequences) -> None:
    sha, dirty = git_state()
    meta = {
        "conf": dataclasses.asdict(conf),
        "drafter": pair.drafter_id,
        "verifier": pair.verifier_id,
        "positions": positions,
        "sequences": sequences,
        "timings": timings,
        "device": device_name(str(next(pair.verifier.parameters()).device)),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "git_sha": sha,
        "git_dirty": dirty,
    }
    path.write_text(json.dumps(meta, indent=2, default=str) + "\n")


def highlights(frame) -> list[str]:
    """A few lines for the terminal: acceptance, KL, stop-mass ratio and out-of-head mass of
    SpS and the headline lossy arms, and q's own out-of-head mass."""
    lines = []
    head_name = "out_of_head_per_1000"

    def pick(rule, parameter, statistic):
        hit = frame[
            (frame.rule == rule) & (frame.parameter == parameter) & (frame.statistic == statistic)
        ]
        return None if hit.empty else hit.iloc[0]

    for rule, parameter in (
        ("sps", ""),
        ("cactus", "delta=1"),
        ("cactus_exact:kl", "delta=1"),
        ("tas", "eps=0.09"),
    ):
        acc, kl = pick(rule, parameter, "acceptance"), pick(rule, parameter, "kl")
        stop, head = pick(rule, parameter, "stop_mass_ratio"), pick(rule, parameter, head_name)
        if acc is not None:
            lines.append(
                f"{rule} {parameter}".strip().ljust(24)
                + f" acceptance {acc.value:.4f} [{acc.ci_low:.4f}, {acc.ci_high:.4f}]"
                + (f"  KL(law||q) {kl.value:.4g}" if kl is not None else "")
                + (f"  stop mass / q's {stop.value:.3f}" if stop is not None else "")
                + (f"  out of head /1000 {head.value:.1f}" if head is not None else "")
            )
    own = pick("verifier", "", head_name)
    if own is not None:
        lines.append(f"{'q (the verifier)'.ljust(24)} out of head /1000 {own.value:.1f}")
    return lines
