"""The rules leaderboard: every acceptance rule on the embedded pair, side by side (`make rules`).

    python scripts/rules_board.py --tasks demo gsm8k --data-dir ../shared/data   # make rules
    python scripts/rules_board.py --tasks demo --limit 3 --max-new-tokens 32 --defaults-only
    python scripts/rules_board.py --report-only                 # redraw from results/rules/

Each rule runs at its source's default and along its parameter curve (ARMS) through the run API
(`cactus_bench.run.run`, the same path as `python run.py`), one row per (rule, task) in
results/rules/rules.csv; finished rows are skipped on a rerun (the run's config hash). The
report joins each arm's exact emitted-law KL(law || q) and acceptance from the frontier CSV
(results/frontier/<pair>.csv, held-out contexts) where the frontier has that arm, and writes
leaderboard.csv, leaderboard.md (with rules_leaderboard.definitions.md beside them) and
figures/score_vs_acceptance.{png,pdf}: the task score against the measured acceptance rate, one
curve per rule. Intervals are the run's own (results/intervals.py's bootstrap over prompts).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# (sampler, parameters): the source's default first, then the curve. test_law keeps the
# default (temperature-1 laws, as the sources) in the HF engine.
ARMS: list[tuple[str, dict]] = [
    ("sps", {}),
    ("cactus", {"delta": 1.0}),
    ("cactus", {"delta": 0.25}),
    ("cactus_exact", {"delta": 1.0, "divergence": "kl"}),
    ("mentored", {"delta": 0.1}),
    ("mentored", {"delta": 0.2}),
    ("mentored", {"delta": 0.5}),
    ("lenience", {"l": 0.5}),
    ("lenience", {"l": 0.3}),
    ("lenience", {"l": 0.1}),
    ("chow", {"alpha": 0.5}),
    ("chow", {"alpha": 0.8}),
    ("diff", {"alpha": 0.5}),
    ("opt", {"alpha": 0.5}),
    ("tokenv1", {"alpha": 0.5}),
    ("tokenv2", {"alpha": 0.5}),
    ("tokenv3", {"alpha": 0.5}),
    ("tokenv3", {"alpha": 0.8}),
    ("fsd", {"threshold": 0.4, "div": "js"}),
    ("fsd_reducible", {"threshold": 0.4, "div": "js"}),
    ("bild", {"tau": 5.0}),
    ("bild", {"tau": 2.0}),
    ("ensemble", {"w": 0.7}),
    ("tas", {"threshold": 0.09}),
]
# The frontier's parameter label of an arm (frontier/arms.py), to join its exact statistics.
FRONTIER_LABEL = {
    "cactus": "delta",
    "cactus_exact": "delta",
    "mentored": "delta",
    "lenience": "l",
    "tas": "eps",
}

DEFINITIONS = """# Definitions for leaderboard.csv

One row per (rule, parameters, task) of results/rules/rules.csv, the embedded pair (SmolLM2-135M
verifier, its distilled drafter), m and sampling as in the run (scripts/rules_board.py).

- `rule`, `params`: the sampler and its parameters (docs/rules.md); `ensemble` runs as interp
- `task`, `n_prompts`: the task and the prompts scored
- `score`, `score_ci_low`, `score_ci_high`: headline task score and its 95 % interval
  (bootstrap over prompts, results/intervals.py)
- `accept_rate`: accepted drafts / drafted tokens, measured by the engine
- `al`, `al_ci_low`, `al_ci_high`: accepted drafts per verification step (no bonus)
- `speedup_tokens`, `speedup_tokens_ci_low`, `speedup_tokens_ci_high`: tokens/s against the
  verifier alone
  (baseline as the run says in results/rules/rules.csv: `baseline_mode`; on a shared CPU the
  machine's load moves it between runs, so compare acceptance and AL first)
- `frontier_acceptance`, `frontier_kl`: the exact mean acceptance and mean KL(law || q) of the
  emitted law for this arm on the frontier's held-out contexts (results/frontier/<pair>.csv),
  where the frontier has the arm; inf when the law puts mass where q = 0; empty otherwise
"""


def run_arms(tasks, limit, max_new_tokens, m, data_dir, defaults_only, out_dir) -> None:
    from omegaconf import OmegaConf

    from cactus_bench.run import format_outcome, run, run_conf_from_dict
    from cactus_bench.samplers import RULES, make_sampler

    model = OmegaConf.to_container(OmegaConf.load(REPO / "configs/model/smollm2_135m.yaml"))
    seen: set[str] = set()
    for name, params in ARMS:
        if defaults_only and name in seen:
            continue
        seen.add(name)
        if not RULES[name].alias_of:  # a run names every parameter: the rule's defaults fill in
            params = {**make_sampler(name, **params).params(), **params}
        for task in tasks:
            conf = run_conf_from_dict(
                {
                    "model": model,
                    "task": {"name": task},
                    "sampler": {"name": name, **params},
                    "backend": {"name": "hf"},
                    "logger": {"name": "csv"},
                    "experiment_name": "rules",
                    "results_dir": str(out_dir),
                    "limit": limit,
                    "max_new_tokens": max_new_tokens,
                    "m": m,
                    "device": "cpu",
                    "threads": 1,
                    "baseline": "cached",
                    "data_dir": data_dir,
                }
            )
            print(format_outcome(run(conf)), flush=True)


def part_machines(rows, task: str) -> set[str]:
    """The CPUs or GPUs a task's rows were timed on (the results' device_name column)."""
    return set(rows[rows.task == task].device_name.dropna().astype(str)) or {"unknown machine"}


def report(out_dir: Path, frontier_csv: Path) -> list[Path]:
    import json

    import pandas as pd
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    from cactus_bench.report.figure_parts import save_figure
    from cactus_bench.results.schema import RENAMED_COLUMNS

    # rows written before the renames (n_samples, speedup) read under today's names
    rows = pd.read_csv(out_dir / "rules.csv").rename(columns=RENAMED_COLUMNS)
    rows = rows[rows.status == "ok"].copy()
    rows["params"] = rows.sampler_params.map(lambda text: json.dumps(json.loads(text)))
    frontier = pd.read_csv(frontier_csv) if frontier_csv.is_file() else None

    def exact(row, statistic):
        params = json.loads(row.sampler_params)
        key = FRONTIER_LABEL.get(row.sampler)
        label = f"{key}={params[key if key != 'eps' else 'threshold']:g}" if key else ""
        rule = (
            f"cactus_exact:{params['divergence']}" if row.sampler == "cactus_exact" else row.sampler
        )
        if frontier is None or (key is None and row.sampler != "sps"):
            return math.nan
        hit = frontier[
            (frontier.rule == rule)
            & (frontier.parameter.fillna("") == label)
            & (frontier.statistic == statistic)
        ]
        return float(hit.value.iloc[0]) if len(hit) else math.nan

    rows["frontier_acceptance"] = rows.apply(lambda r: exact(r, "acceptance"), axis=1)
    rows["frontier_kl"] = rows.apply(lambda r: exact(r, "kl"), axis=1)
    columns = [
        "sampler",
        "params",
        "task",
        "n_prompts",
        "score",
        "score_ci_low",
        "score_ci_high",
        "accept_rate",
        "al",
        "al_ci_low",
        "al_ci_high",
        "speedup_tokens",
        "speedup_tokens_ci_low",
        "speedup_tokens_ci_high",
        "frontier_acceptance",
        "frontier_kl",
    ]
    board = rows[columns].rename(columns={"sampler": "rule"}).sort_values(["task", "rule"])
    board.to_csv(out_dir / "leaderboard.csv", index=False, float_format="%.4g")
    (out_dir / "leaderboard.definitions.md").write_text(DEFINITIONS)
    (out_dir / "leaderboard.md").write_text(board.to_markdown(index=False, floatfmt=".3g") + "\n")

    figure = Figure(figsize=(7 * len(board.task.unique()), 5), layout="constrained")
    axes = figure.subplots(1, len(board.task.unique()), squeeze=False)[0]
    for ax, (task, part) in zip(axes, board.groupby("task"), strict=True):
        palette = colormaps["tab20"]  # 16+ rules: the default 10-colour cycle would repeat
        for index, (rule, line) in enumerate(part.groupby("rule")):
            line = line.sort_values("accept_rate")
            err = [line.score - line.score_ci_low, line.score_ci_high - line.score]
            ax.errorbar(
                line.accept_rate,
                line.score,
                yerr=err,
                marker="osD^v<>P"[index % 8],
                color=palette(index % 20),
                capsize=2,
                label=rule,
                markersize=4,
            )
        ax.set_xlabel("measured acceptance rate (accepted / drafted)")
        ax.set_ylabel("task score (95 % interval)")
        machines = ", ".join(sorted(part_machines(rows, task)))
        ax.set_title(f"{task}: score against acceptance, one curve per rule", fontsize=10)
        figure.supxlabel(f"measured on {machines}", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    return save_figure(figure, out_dir / "figures" / "score_vs_acceptance", ("png", "pdf"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["demo", "gsm8k"])
    parser.add_argument("--limit", type=int, default=15)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--m", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--defaults-only", action="store_true", help="each rule's default only")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--out", default="results/rules")
    parser.add_argument("--frontier-csv", default="results/frontier/smollm2_135m.csv")
    args = parser.parse_args()
    out_dir = Path(args.out)
    if not args.report_only:
        run_arms(
            args.tasks,
            args.limit,
            args.max_new_tokens,
            args.m,
            args.data_dir,
            args.defaults_only,
            out_dir,
        )
    for path in report(out_dir, Path(args.frontier_csv)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
