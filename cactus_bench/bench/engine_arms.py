"""The engine benchmark's arms (bench_engine.py): our decoders and transformers' generation on
the same pair, prompts and sampling, interleaved in one process, and one summary row per arm.

Arms: ours_ar (AutoregressiveDecoder), ours_spec (SpeculativeDecoder), hf_assisted
(`generate(assistant_model=...)` with num_assistant_tokens = m, schedule "constant",
assistant_confidence_threshold = 0, do_sample with the same temperature / top-k / top-p) and
hf_ar (plain `generate`). EOS is ignored so every request makes exactly max_new_tokens tokens.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

from cactus_bench.bench.machine import machine_facts
from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
from cactus_bench.paper import PAPER
from cactus_bench.samplers import make_sampler
from cactus_bench.tasks.prompt_ids import chat_prompt_ids

ARMS = ("ours_ar", "ours_spec", "hf_assisted", "hf_ar")
QUESTIONS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May?",
    "Write a short poem about the sea. Do not use any commas.",
    "Explain in two sentences why the sky is blue.",
    "A train travels 60 miles per hour for 3 hours. How far does it go? Answer step by step.",
)
# An arm's summary (`summarise` and `add_ratios`); the decoder-only ones are empty for HF's arms.
METRICS = (
    "arm",
    "requests",
    "new_tokens",
    "seconds",
    "tokens_per_s",
    "mean_request_tokens_per_s",
    "speedup_vs_ours_ar",
    "steps",
    "accepted_length",
    "tokens_per_step",
    "draft_ms_per_step",
    "verify_ms_per_step",
    "sampler_ms_per_step",
    "overhead_frac",
    "ideal_speedup",
)


@dataclasses.dataclass(frozen=True)
class EngineBench:
    """What one engine benchmark measures: the pair, the rule and sampling, the requests."""

    pair: str = "tiny"
    device: str = "cpu"
    dtype: str | None = None
    m: int = 4
    sampler: str = "sps"
    delta: float | None = None
    temperature: float = PAPER.temperature
    top_p: float = PAPER.top_p
    top_k: int = PAPER.top_k
    max_new_tokens: int = 128
    prompts: int = 4
    repeats: int = 3
    arms: tuple[str, ...] = ARMS

    @classmethod
    def from_namespace(cls, namespace) -> EngineBench:
        """The fields of `namespace` (argparse's) that name one of ours."""
        names = (field.name for field in dataclasses.fields(cls))
        return cls(**{name: getattr(namespace, name) for name in names})


def encode_prompts(tokenizer, chat_kwargs: dict, count: int) -> list[list[int]]:
    """The first `count` questions, encoded as a run encodes its prompts."""
    return [chat_prompt_ids(tokenizer, question, chat_kwargs) for question in QUESTIONS[:count]]


@contextmanager
def assisted_config(drafter, verifier, m: int):
    """Fixed draft length for HF (ECOSYSTEM.md) and no EOS, restored afterwards."""
    saved = [
        (cfg, cfg.to_dict()) for cfg in (drafter.generation_config, verifier.generation_config)
    ]
    drafter.generation_config.num_assistant_tokens = m
    drafter.generation_config.num_assistant_tokens_schedule = "constant"
    drafter.generation_config.assistant_confidence_threshold = 0
    for cfg, _ in saved:
        cfg.eos_token_id = None
    try:
        yield
    finally:
        for cfg, values in saved:
            for key in (
                "num_assistant_tokens",
                "num_assistant_tokens_schedule",
                "assistant_confidence_threshold",
                "eos_token_id",
            ):
                setattr(cfg, key, values.get(key))


def make_runners(bench: EngineBench, drafter, verifier, tokenizer, token_map):
    """arm -> callable(prompt_ids, seed) -> (new_tokens, seconds, RequestRecord or None)."""
    sampling = SamplingParams(bench.temperature, bench.top_p, bench.top_k)
    rule_kwargs = {"delta": bench.delta} if bench.delta is not None else {}
    rule = make_sampler(bench.sampler, **rule_kwargs)
    ours_ar = AutoregressiveDecoder(
        verifier, tokenizer, sampling=sampling, eos_token_ids=[], device=bench.device
    )
    ours_spec = SpeculativeDecoder(
        drafter,
        verifier,
        tokenizer,
        rule,
        num_draft_tokens=bench.m,
        sampling=sampling,
        eos_token_ids=[],
        device=bench.device,
        token_map=token_map,
    )
    hf_kwargs = dict(
        do_sample=bench.temperature > 0,
        max_new_tokens=bench.max_new_tokens,
        pad_token_id=tokenizer.pad_token_id or 0,
    )
    if bench.temperature > 0:
        hf_kwargs.update(temperature=bench.temperature, top_p=bench.top_p, top_k=bench.top_k)

    def ours(decoder):
        def run(prompt, seed):
            record = decoder.generate(prompt, bench.max_new_tokens, seed=seed)
            return record.num_generated, record.total_time_s, record

        return run

    def hf(assistant):
        def run(prompt, seed):
            torch.manual_seed(seed)
            ids = torch.tensor([prompt], device=bench.device)
            sync()
            start = time.perf_counter()
            with torch.inference_mode():
                out = verifier.generate(
                    ids, attention_mask=torch.ones_like(ids), assistant_model=assistant, **hf_kwargs
                )
            sync()
            return out.shape[1] - ids.shape[1], time.perf_counter() - start, None

        return run

    def sync():
        if torch.device(bench.device).type == "cuda":
            torch.cuda.synchronize()

    return {
        "ours_ar": ours(ours_ar),
        "ours_spec": ours(ours_spec),
        "hf_assisted": hf(drafter),
        "hf_ar": hf(None),
    }


def run_arms(bench: EngineBench, arms, drafter, verifier, tokenizer, token_map, prompts) -> dict:
    """arm -> its runs over every (prompt, repeat), the arms taking turns to go first."""
    runners = make_runners(bench, drafter, verifier, tokenizer, token_map)
    results: dict[str, list] = defaultdict(list)
    with assisted_config(drafter, verifier, bench.m):
        for arm in arms:  # warm-up: first calls pay one-off allocation and dispatch costs
            runners[arm](prompts[0][:8], seed=0)
        jobs = [(p, r) for r in range(bench.repeats) for p in range(len(prompts))]
        for index, (prompt_index, repeat) in enumerate(tqdm(jobs, desc="bench_engine")):
            order = arms[index % len(arms) :] + arms[: index % len(arms)]  # rotate who goes first
            for arm in order:
                seed = 1000 * repeat + prompt_index
                results[arm].append(runners[arm](prompts[prompt_index], seed))
    return results


def summarise(arm: str, runs: list) -> dict:
    tokens = sum(run[0] for run in runs)
    seconds = sum(run[1] for run in runs)
    row = {
        "arm": arm,
        "requests": len(runs),
        "new_tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "mean_request_tokens_per_s": sum(r[0] / r[1] for r in runs) / len(runs),
    }
    records = [run[2] for run in runs if run[2] is not None]
    if records:
        steps = sum(r.num_steps for r in records)
        decode = sum(r.total_time_s - r.prefill_time_s for r in records)
        row.update(
            steps=steps,
            accepted_length=sum(sum(r.accepted_per_step) for r in records) / steps,
            tokens_per_step=sum(r.num_generated for r in records) / steps,
            draft_ms_per_step=1e3 * sum(r.draft_time_s for r in records) / steps,
            verify_ms_per_step=1e3 * sum(r.verify_time_s for r in records) / steps,
            sampler_ms_per_step=1e3 * sum(r.sampler_time_s for r in records) / steps,
            overhead_frac=sum(r.overhead_time_s for r in records) / decode,
        )
    return row


def add_ratios(rows: list[dict]) -> None:
    """Each row's speedup over ours_ar, and for ours_spec the speedup its accepted length and
    measured draft / verify costs predict (one verifier step per token for ours_ar)."""
    base = next(row for row in rows if row["arm"] == "ours_ar")
    ar_token_ms = base["verify_ms_per_step"]  # one verifier forward + processing per token
    for row in rows:
        row["speedup_vs_ours_ar"] = row["tokens_per_s"] / base["tokens_per_s"]
        if row["arm"] == "ours_spec":
            step_ms = row["draft_ms_per_step"] + row["verify_ms_per_step"]
            row["ideal_speedup"] = row["tokens_per_step"] * ar_token_ms / step_ms


def row_context(bench: EngineBench) -> dict:
    """The columns every arm's CSV row shares: when, what was measured, on which machine."""
    facts = machine_facts()
    return {
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "pair": bench.pair,
        "device": bench.device,
        "dtype": bench.dtype or "",
        "threads": facts["threads"],
        "m": bench.m,
        "sampler": bench.sampler,
        "delta": bench.delta,
        "temperature": bench.temperature,
        "top_p": bench.top_p,
        "top_k": bench.top_k,
        "max_new_tokens": bench.max_new_tokens,
        "prompts": bench.prompts,
        "repeats": bench.repeats,
        "torch": torch.__version__,
        "cpu": facts["cpu"],
        "isa": facts["isa"],
        "load_1m": facts["load_1m"],
    }


def append_rows(out: Path, context: dict, rows: list[dict]) -> None:
    """Appends to `out` one row per arm: `context`, then METRICS (a metric an arm lacks: an empty
    cell). A file written before the machine columns first gains them: its rows keep their
    cells, the new columns stay empty, so the appended rows line up with the header."""
    columns = list(context) + list(METRICS)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        with out.open(newline="") as handle:
            reader = csv.DictReader(handle)
            header, earlier = reader.fieldnames or [], list(reader)
        if header != columns:
            if not set(header) <= set(columns):
                raise SystemExit(f"{out} has other columns ({header}); move it or pass --out")
            with out.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=columns, restval="")
                writer.writeheader()
                writer.writerows(earlier)
    new_file = not out.exists()
    with out.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")  # missing: empty cell
        if new_file:
            writer.writeheader()
        for row in rows:
            writer.writerow({**context, **{key: row.get(key, "") for key in METRICS}})
    print(f"appended {len(rows)} rows to {out}")
