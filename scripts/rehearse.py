"""Rehearse what a GPU user runs first: every paper pair from a local hub cache, offline.

    python scripts/rehearse.py                  # make rehearse
    python scripts/rehearse.py --pairs qwen3_8b,deepseek_r1_7b --rebuild

1. Builds (once) tiny random stand-ins of every hub checkpoint the configs/model YAMLs name
   (cactus_bench.rehearsal: real architectures, vocabulary sizes and config fields, the
   real Qwen3 tokenizer) in a hub cache, default ~/.cache/cactus_bench/rehearsal_hub.
2. Runs them through the unchanged CLI with HF_HOME pointed there and HF_HUB_OFFLINE=1, as
       python run.py -m model=<every pair> task=gsm8k limit=2 max_new_tokens=32 data_dir=...
   plus one Qwen3 run with enable_thinking=false and both revisions pinned to commit hashes,
   and experiment=batch_gpu's Qwen3 config at batch 4.
3. Prints a table (pair, loaded, template ok, vocab sizes, token_map, steps, AL, tokens/s,
   CSV row) and exits 1 when a pair failed. The weights are random: output text is gibberish,
   scores are 0 and tokens/s says nothing about speed; what passes is the plumbing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from cactus_bench.rehearsal import (
    HUB_MODELS,
    build_hub_cache,
    default_home,
    hub_pairs,
    pinned_revisions,
    repo_folder,
)
from cactus_bench.rehearsal.check import (
    template_problem,
    tokenizer_kind,
    vocab_facts,
)

REPO = Path(__file__).resolve().parents[1]

PINNED_NAME = "qwen3_8b_pinned_nothink"  # the extra run: commits pinned, thinking off
BATCH_NAME = "qwen3_8b_batch4"  # the other: experiment=batch_gpu's config at batch 4
COLUMNS = (
    "pair",
    "loaded",
    "template ok",
    "V drafter/verifier",
    "token_map",
    "steps",
    "AL",
    "tokens/s",
    "CSV row",
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="HF_HOME of the rehearsal cache")
    parser.add_argument("--pairs", default="", help="comma-separated pair names (default: all)")
    parser.add_argument("--data-dir", type=Path, default=None, help="offline data (GSM8K)")
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: new)")
    parser.add_argument("--rebuild", action="store_true", help="rewrite the cache first")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    return parser.parse_args()


def default_data_dir() -> Path | None:
    for candidate in (os.environ.get("CACTUS_BENCH_DATA"), REPO.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "gsm8k" / "test.jsonl").is_file():
            return Path(candidate)
    return None


def select_pairs(names: str):
    pairs = hub_pairs()
    if names:
        wanted = names.split(",")
        unknown = set(wanted) - {spec.name for spec in pairs}
        if unknown:
            raise SystemExit(f"rehearse: no hub pair named {sorted(unknown)}")
        pairs = [spec for spec in pairs if spec.name in wanted]
    missing = [s for s in pairs if {s.drafter, s.verifier} - set(HUB_MODELS)]
    for spec in missing:
        print(
            f"rehearse: skipping {spec.name}: no stand-in for its checkpoints (add them to "
            "cactus_bench/rehearsal/hub_models.py)"
        )
    return [spec for spec in pairs if spec not in missing]


def run_cli(overrides: list[str], env: dict[str, str], log: Path) -> int:
    """run.py with `overrides`, its output teed to `log`; returns the exit status."""
    command = [sys.executable, str(REPO / "run.py"), *overrides]
    print("$", " ".join(command[1:]), flush=True)
    with log.open("a") as sink:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for line in process.stdout:
            sink.write(line)
            if line.startswith(("run ", "error:", "results:")) or " / gsm8k / " in line:
                print("  " + line.rstrip(), flush=True)
        return process.wait()


def main() -> int:
    args = parse_args()
    home = args.home or default_home()
    pairs = select_pairs(args.pairs)
    if not pairs:
        raise SystemExit("rehearse: nothing to run")
    started = time.perf_counter()
    print(f"rehearse: hub cache {home / 'hub'} ({len(pairs)} pairs)", flush=True)
    hub = build_hub_cache(home, pinned_revisions(pairs), force=args.rebuild)
    data_dir = args.data_dir or default_data_dir()
    task = ["task=gsm8k", f"data_dir={data_dir}"] if data_dir else ["task=demo"]
    if not data_dir:
        print("rehearse: no GSM8K data folder (--data-dir): running the built-in demo task")
    out = args.out or home / "runs" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    common = [
        *task,
        f"limit={args.limit}",
        f"max_new_tokens={args.max_new_tokens}",
        f"results_dir={out}",
        "experiment_name=rehearsal",
        "threads=1",
        "device=cpu",
    ]
    log = out / "rehearsal.log"
    names = ",".join(spec.name for spec in pairs)
    run_cli(["-m", f"model={names}", *common, f"hydra.sweep.dir={out}/multirun"], env, log)
    checks = list(pairs)
    qwen = next((spec for spec in pairs if spec.name == "qwen3_8b"), None)
    if qwen is not None:
        checks.append(run_pinned_without_thinking(qwen, hub, common, env, log))
        checks.append(run_batched(qwen, common, env, log))
    table, failures = rehearsal_table(hub, checks, out / "rehearsal.csv")
    minutes = (time.perf_counter() - started) / 60
    passed = f"{len(checks) - len(failures)}/{len(checks)} pairs passed in {minutes:.1f} min"
    text = "\n".join([table, "", f"{passed}; CSV {out / 'rehearsal.csv'}; log {log}", *failures])
    (out / "rehearsal.md").write_text(text + "\n")
    print("\n" + text)
    return 1 if failures else 0


def run_pinned_without_thinking(qwen, hub: Path, common: list[str], env, log: Path):
    """qwen3_8b with both revisions pinned to commit hashes (resolved through snapshots/, not
    refs/) and enable_thinking=false (the template's other branch); returns its PairSpec."""
    repos = (qwen.drafter, qwen.verifier)
    commits = [(hub / repo_folder(repo) / "refs" / "main").read_text() for repo in repos]
    overrides = [
        f"model={qwen.name}",
        f"model.name={PINNED_NAME}",
        "model.chat_template_kwargs.enable_thinking=false",
        f"model.drafter_revision={commits[0]}",
        f"model.verifier_revision={commits[1]}",
    ]
    run_cli([*overrides, *common], env, log)
    return replace(
        qwen,
        name=PINNED_NAME,
        drafter_revision=commits[0],
        verifier_revision=commits[1],
        chat_template_kwargs={"enable_thinking": False},
    )


def run_batched(qwen, common: list[str], env, log: Path):
    """experiment=batch_gpu's config for qwen3_8b at batch 4 (Cactus, m = 2): the batched
    engine on the pair's real architecture and vocabulary; returns its PairSpec."""
    overrides = [
        "experiment=batch_gpu",
        f"model={qwen.name}",
        f"model.name={BATCH_NAME}",
        "sampler=cactus_1.0",
        "batch=4",
        "m=2",
    ]
    run_cli(
        [*overrides, *common, "limit=4", "hydra.sweep.dir=" + str(log.parent / "batch")], env, log
    )
    return replace(qwen, name=BATCH_NAME)


def rehearsal_table(hub: Path, checks, csv_path: Path) -> tuple[str, list[str]]:
    """The Markdown table and one line per failed pair."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoTokenizer

    from cactus_bench.store import ResultStore

    frame = ResultStore(csv_path).read()
    records = {}
    if csv_path.with_name("rehearsal.records.jsonl").exists():
        for line in csv_path.with_name("rehearsal.records.jsonl").read_text().splitlines():
            record = json.loads(line)
            records.setdefault((record["run_id"], record["arm"]), record)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    failures = []
    for spec in checks:
        rows = frame[frame["model_pair"] == spec.name]
        ok = rows[rows["status"] == "ok"]
        facts = vocab_facts(hub, spec)
        vocab = f"{facts.drafter_vocab:,} / {facts.verifier_vocab:,}"
        token_map = f"{facts.shared_ids:,} ids" if facts.shared_ids else "-"
        if ok.empty:
            error = rows["error"].iloc[-1] if not rows.empty else "no row written"
            failures.append(f"FAIL {spec.name}: {error}")
            lines.append(
                f"| {spec.name} | no | - | {vocab} | {token_map} | - | - | - | "
                f"{'error row' if not rows.empty else 'no'} |"
            )
            continue
        row = ok.iloc[-1]
        record = records.get((row["run_id"], "spec"))
        folder = hub / repo_folder(spec.verifier) / "snapshots"
        revision = spec.verifier_revision or (folder.parent / "refs" / "main").read_text()
        tokenizer = AutoTokenizer.from_pretrained(str(folder / revision))
        thinking = spec.chat_template_kwargs.get("enable_thinking")
        problem = (
            template_problem(tokenizer.decode(record["prompt_ids"]), tokenizer_kind(spec), thinking)
            if record
            else "no records"
        )
        if problem:
            failures.append(f"FAIL {spec.name}: template: {problem}")
        lines.append(
            f"| {spec.name} | yes | {'no' if problem else 'yes'} | {vocab} | {token_map} | "
            f"{int(row['num_steps'])} | {row['al']:.2f} | {row['tokens_per_s_spec']:.1f} | yes |"
        )
    return "\n".join(lines), failures


if __name__ == "__main__":
    sys.exit(main())
