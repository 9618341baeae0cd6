"""make gpu-bench: the HF engine's costs on one GPU beside their floors, in at most 8 minutes.

    make gpu-bench                    # CUDA: results/bench/gpu_*.csv + gpu_bench.json
    make gpu-bench DRY=1              # the same stages on a CPU, tiny shapes (CI runs it)
    PYTHONPATH=. python3 scripts/gpu_bench.py --budget-s 420   # a GPU machine's own image
    python scripts/gpu_bench.py --forecast-from results/bench   # the forecast alone, no device

Runs with the package on PYTHONPATH and only torch and transformers installed (no hydra-core,
lm-eval or wandb), on torch 2.11 / transformers 5.17 as on the pinned versions. Shapes: Qwen3
0.6B, 8B and 14B from their configs with random bf16 weights (no download). Stages, each
written as soon as it ends (a budget cut leaves every finished stage on disk):

1. machine: the GPU, versions, commit, the measured copy bandwidth (every floor's denominator);
2. forwards: one batched forward per shape, rows B and new tokens n (the verifiers also at
   n = 21, the m = 20 verify) at a 512-token context, eager and as a replayed CUDA graph, with
   capture seconds and the floor of streaming what a decode step reads (the weights less an
   untied input embedding) -> gpu_forward.csv, and the cost tables `report batch --cost-table`
   reads (device, model, batch, tokens_per_row, seconds): gpu_step_costs.csv (graphs, the
   engine's default on CUDA) and gpu_step_costs_eager.csv;
3. engine: 0.6B drafting for 8B, the verifier alone, SpS and Cactus (delta 1, m 4) at batch 1,
   8, 32 and SpS at m 20, batch 1: tokens/s, mean step, capture seconds and what ran (graph
   replays, eager forwards, a failed capture, the phase means, as the engine reports them)
   -> gpu_engine.csv;
4. profile: one 0.6B forward at batch 1 under torch.profiler: its attention backend, and the
   kernels per layer of one graph replay -> gpu_bench.json's drafter_profile;
5. rules: every catalogue rule's `verify` at V = 151,936 (batch 1, 8, 32, 64; m 2 and 20) as the
   engine calls it, and SpS and Cactus compiled (fullgraph, inductor; refused where the graph
   keeps no op) at three settings, beside the floor of reading p and q once at the same
   bandwidth -> gpu_verify.csv;
6. forecast (bench/gpu_forecast.py): the step model from stages 2, 3 and 5, held to the engine's
   measured steps it was not fitted on (within 10 % or the gap printed), and the paper's cell
   (0.6B -> 14B, m = 20) at the paper's AL and at the embedded pair's, each naming its
   acceptance source -> gpu_forecast.csv.
Exit 0 when every stage ran, 3 when the budget cut one (INCOMPLETE), 2 without CUDA (not --dry).
gpu_bench.json's first field says whether the tree was clean (`tree`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INCOMPLETE = 3
# The 14B shape first: it is freed before the pair is built (the engine stage needs the pair).
SHAPES = {"large": "Qwen/Qwen3-14B", "drafter": "Qwen/Qwen3-0.6B", "verifier": "Qwen/Qwen3-8B"}
LONG_M = 20  # the paper's cell's draft length: its verify feeds 21 tokens
LARGE = "Qwen3-14B"  # the paper's cell's verifier (the "large" shape)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry", action="store_true", help="CPU, tiny shapes (the script's logic)")
    parser.add_argument("--out-dir", type=Path, default=None, help="default results/bench")
    parser.add_argument("--budget-s", type=float, default=420.0, help="no stage starts after it")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=[], help="stages to run (default: all)")
    parser.add_argument(
        "--forecast-from",
        type=Path,
        default=None,
        help="print and write the forecast from this folder's gpu_*.csv (no device)",
    )
    parser.add_argument(
        "--fused-rows",
        type=int,
        nargs="*",
        default=[],
        help="row counts also timed inductor-compiled, then captured (CUDA; ~1 min a shape)",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    if args.forecast_from is not None:
        return 0 if forecast_lines(args.forecast_from, args.forecast_from) else 1
    import torch

    if not args.dry and not torch.cuda.is_available():
        print("gpu-bench: no CUDA device here; run it on a GPU node, or DRY=1 for the CPU run")
        return 2
    out = args.out_dir or (Path(tempfile.mkdtemp()) if args.dry else REPO / "results/bench")
    out.mkdir(parents=True, exist_ok=True)
    plan = Plan(args, out, torch.device("cpu" if args.dry else "cuda"))
    for stage in (plan.machine, plan.forwards, plan.engine, plan.profile, plan.rules):
        if args.only and stage.__name__ not in {"machine", *args.only}:
            continue
        if time.monotonic() - plan.started > args.budget_s:
            plan.summary["skipped"].append(stage.__name__)
            continue
        began = time.monotonic()
        stage()
        plan.summary["stages_s"][stage.__name__] = round(time.monotonic() - began, 1)
        plan.write_json()
        print(f"gpu-bench: {stage.__name__} done in {time.monotonic() - began:.0f} s", flush=True)
    large = "the tiny verifier (dry run)" if args.dry else LARGE
    plan.summary["forecast"] = forecast_lines(out, out, large)  # every run: from what is on disk
    plan.write_json()
    print(f"gpu-bench: wrote {out}")
    return INCOMPLETE if plan.summary["skipped"] else 0


class Plan:
    """The stages and what they share: the device, the grids, the built models."""

    def __init__(self, args, out: Path, device):
        import torch

        self.args, self.out, self.device, self.torch = args, out, device, torch
        self.started = time.monotonic()
        dry = args.dry
        self.rows_grid = [1, 2] if dry else [1, 8, 32, 64]
        self.m = 4
        self.summary = {
            "tree": tree_state(),  # first: a record from a dirty tree says so at once
            "dry": dry,
            "stages_s": {},
            "skipped": [],
            "date": time.strftime("%F %T"),
        }
        self.models: dict[str, object] = {}
        self.tokenizer = None

    # ---- stages -----------------------------------------------------------------------------
    def machine(self) -> None:
        import transformers

        from cactus_bench.bench.gpu_costs import copy_bandwidth

        torch = self.torch
        name = torch.cuda.get_device_name(0) if self.device.type == "cuda" else "cpu (dry run)"
        self.bandwidth = copy_bandwidth(self.device, gib=0.05 if self.args.dry else 2.0)
        self.summary.update(
            device=name,
            torch=torch.__version__,
            transformers=transformers.__version__,
            commit=_commit(),
            copy_bandwidth_gb_s=round(self.bandwidth / 1e9, 1),
        )
        self.device_name = name

    def forwards(self) -> None:
        from cactus_bench.bench.gpu_costs import decode_bytes, floor_s, forward_costs, release

        rows, tables = [], {"graph": [], "eager": []}
        for role, repo_id in SHAPES.items():
            model = self._model(role)
            floor = floor_s(decode_bytes(model), self.bandwidth)
            sizes = [1, 2] if role == "drafter" else [1, self.m + 1, LONG_M + 1]
            on_cuda = self.device.type == "cuda"
            fused = self.args.fused_rows if on_cuda and role != "large" else ()
            grid = (self.rows_grid, sizes, self.args.context, self.args.repeats)
            costs = forward_costs(model, self.device, *grid, graphs=on_cuda, fused_rows=fused)
            for row in costs:
                rows.append({"shape": repo_id, "role": role, **row, "floor_s": floor})
                if role != "large" and row["seconds"] is not None and "fused" not in row["path"]:
                    keys = ("batch", "tokens_per_row", "seconds")
                    entry = {"device": self.device_name, "model": role}
                    tables[row["path"]].append({**entry, **{key: row[key] for key in keys}})
            if role == "large":
                del self.models["large"], model  # the engine stage needs only the pair
                release(self.device)
            self._write("gpu_forward.csv", rows)
            if self.device.type == "cuda":
                peak = self.torch.cuda.max_memory_allocated() / 2**30
                self.summary[f"peak_gib_after_{role}"] = round(peak, 1)
        self._write("gpu_step_costs.csv", tables["graph"] or tables["eager"])
        self._write("gpu_step_costs_eager.csv", tables["eager"])

    def rules(self) -> None:
        from cactus_bench.bench.gpu_costs import floor_s, verify_costs
        from cactus_bench.samplers.catalogue import RULES

        vocab = 512 if self.args.dry else 151_936
        batches = [1, 2] if self.args.dry else [1, 8, 32, 64]
        grid = [(info.name, {}) for info in RULES.values()]
        fused = [("sps", 1, 2), ("cactus", 1, 2), ("cactus", 64, 20)]  # each compile ~10-30 s
        if self.args.dry:  # one compile on a CPU: the path's logic, not its speed
            fused = [("sps", 1, 2)]
        rows = []
        for batch in batches:  # written batch by batch: a cut run keeps what it measured
            if time.monotonic() - self.started > self.args.budget_s:
                self.summary["skipped"].append(f"rules at batch {batch}")
                break
            rows += verify_costs(
                grid, self.device, vocab, [batch], [2, 20], self.args.repeats, fused
            )
            for row in rows:
                row["floor_s"] = floor_s(row["law_bytes"], self.bandwidth)  # p and q read once
                row["device"] = self.device_name
            self._write("gpu_verify.csv", rows)

    def engine(self) -> None:
        from cactus_bench.bench.gpu_engine import engine_costs

        batches = [1, 2] if self.args.dry else [1, 8, 32]
        new_tokens = 8 if self.args.dry else 64
        pair = (self._model("drafter"), self._model("verifier"), self._tokenizer())
        # SpS at m = 20, batch 1: a step the forecast's fit (m = 4) did not see
        arms = [("verifier", 0, batches), ("sps", self.m, batches), ("cactus", self.m, batches)]
        arms.append(("sps", LONG_M, [1]))
        rows = engine_costs(*pair, self.device, arms, self.args.context, new_tokens)
        for row in rows:
            row["device"] = self.device_name
        self._write("gpu_engine.csv", rows)

    def profile(self) -> None:
        from cactus_bench.bench.gpu_profile import forward_profile

        graphs = self.device.type == "cuda"
        model = self._model("drafter")
        found = forward_profile(model, self.device, self.args.context, graphs)
        self.summary["drafter_profile"] = {"shape": SHAPES["drafter"], **found}

    # ---- helpers ----------------------------------------------------------------------------
    def _model(self, role: str):
        if role not in self.models:
            self.models[role] = self._build(role)
        return self.models[role]

    def _build(self, role: str):
        torch = self.torch
        if self.args.dry:
            from cactus_bench.models.tiny import make_tiny_pair

            drafter, verifier, self.tokenizer = make_tiny_pair(seed=0)
            return drafter if role == "drafter" else verifier
        from transformers import AutoConfig, AutoModelForCausalLM

        from cactus_bench.rehearsal.hub_models import hub_model

        spec = hub_model(SHAPES[role])
        config = dict(spec.config, **spec.real_sizes)
        config = AutoConfig.for_model(config.pop("model_type"), **config)
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(self.device):
                model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        finally:
            torch.set_default_dtype(previous)
        return model.eval()

    def _tokenizer(self):
        if self.tokenizer is None:
            from cactus_bench.models.tiny import make_tiny_tokenizer

            self.tokenizer = make_tiny_tokenizer()  # decodes for stop checks; ids are random
        return self.tokenizer

    def _write(self, name: str, rows: list[dict]) -> None:
        self._write_rows(self.out / name, rows)

    @staticmethod
    def _write_rows(path: Path, rows: list[dict]) -> None:
        import csv

        if not rows:
            return
        columns = list(dict.fromkeys(key for row in rows for key in row))
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)

    def write_json(self) -> None:
        text = json.dumps(self.summary, indent=2)
        (self.out / "gpu_bench.json").write_text(text + "\n", encoding="utf-8")


def forecast_lines(costs_dir: Path, out: Path, large: str = LARGE) -> list[str]:
    """Prints (and returns) the forecast from costs_dir's gpu_*.csv; writes gpu_forecast.csv to
    `out`. An empty list where the costs are not all there (a stage cut or failed)."""
    from cactus_bench.bench import gpu_forecast as fc

    names = ("gpu_forward.csv", "gpu_verify.csv", "gpu_engine.csv")
    if not all((costs_dir / name).exists() for name in names):
        print(f"gpu-bench: no forecast: {costs_dir} lacks one of {', '.join(names)}")
        return []
    forwards, verifies, engines = (fc.read_rows(costs_dir / name) for name in names)
    try:
        costs = fc.costs_from_rows(forwards, verifies, engines)
        checks = fc.engine_check(costs, engines)
        rows = fc.cell_forecast(costs, "large", LONG_M, paper_acceptances(), large)
        embedded = fc.embedded_acceptance(REPO / "results/batch/batch_sweep.csv")
        rows += fc.cell_forecast(costs, "large", LONG_M, [embedded], large)
        rows += fc.cell_forecast(costs, "large", embedded.measured_at_m, [embedded], large)
    except (KeyError, ValueError) as error:
        print(f"gpu-bench: no forecast: {type(error).__name__}: {error}")
        return []
    Plan._write_rows(out / "gpu_forecast.csv", rows)
    add_overheads(out / "gpu_step_costs.csv", fc.cost_table_rows(forwards, verifies, engines))
    lines = fc.report_lines(costs, checks, rows)
    print("\n".join(lines))
    return lines


def add_overheads(table: Path, rows: list[dict]) -> None:
    """Puts the rule and overhead rows into the `report batch --cost-table` table (replacing
    any earlier ones), so that its forecast pays them too."""
    if not table.exists() or not rows:
        return
    from cactus_bench.bench.gpu_forecast import read_rows

    kept = [r for r in read_rows(table) if r["model"] in ("drafter", "verifier")]
    Plan._write_rows(table, kept + rows)


def paper_acceptances():
    """The paper's Table 1 AL of the cell (0.6B -> 14B, m = 20): Cactus delta 1 and SpS, GSM8K
    and GPQA (cactus_bench/report/paper_values.yaml)."""
    from cactus_bench.bench.gpu_forecast import Acceptance

    try:
        from cactus_bench.report.reference import DEFAULT_REFERENCE, load_reference
    except ImportError as error:  # the paper's values need PyYAML (transformers brings it)
        print(f"gpu-bench: the paper's AL unavailable ({error}); the embedded pair's only")
        return []
    reference, out = load_reference(), []
    for rule, delta in (("cactus", 1.0), ("sps", None)):
        for task in ("gsm8k", "gpqa"):
            key = ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B", LONG_M, rule, delta, task, "al")
            found = reference.lookup(*key)
            source = f"the paper's Table 1 ({DEFAULT_REFERENCE.name}: {found.source})"
            name = f"paper {rule}{'' if delta is None else f' delta {delta:g}'} {task}"
            out.append(Acceptance(name, rule, found.value, source))
    return out


def tree_state() -> str:
    """The tree's state, with the commit: clean, dirty (code or configs differ from the commit;
    results/ excluded) or unknown (store.metadata.git_state). Where the tree travelled without
    its history (a lent GPU machine), the sending checkout pins both:
    CACTUS_BENCH_GIT_SHA=<sha> CACTUS_BENCH_GIT_DIRTY=false|true."""
    from cactus_bench.store.metadata import git_state

    sha, dirty = git_state()
    state = {True: "dirty", False: "clean"}.get(dirty, "unknown")
    return f"{state} at {(sha or _commit())[:7]}"


def _commit() -> str:
    """HEAD's short hash; CACTUS_BENCH_COMMIT names it where the tree was copied without its
    history (a lent GPU machine)."""
    if os.environ.get("CACTUS_BENCH_COMMIT"):
        return os.environ["CACTUS_BENCH_COMMIT"]
    try:
        command = ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
