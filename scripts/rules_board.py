"""The rules leaderboard: every acceptance rule on the embedded pair, side by side (`make rules`).

    python scripts/rules_board.py --tasks demo gsm8k --data-dir ../shared/data   # make rules
    python scripts/rules_board.py --tasks demo --limit 3 --max-new-tokens 32 --defaults-only
    python scripts/rules_board.py --report-only                 # redraw from results/rules/
    python scripts/rules_board.py --reverse ...   # a second worker: arms last-first, same --out
    python scripts/rules_board.py --rules mentored fsd ...      # only these rules' arms

Each rule runs at its source's default and along its parameter curve (ARMS) through the run API
(`cactus_bench.run.run`, the same path as `python run.py`), one row per (rule, task) in
results/rules/rules.csv; finished rows are skipped on a rerun (the run's config hash), so an
interrupted board resumes. The table and figure come from that CSV alone
(`cactus_bench.report.leaderboard`; `make rules-report` redraws them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cactus_bench.report.leaderboard import write_leaderboard

REPO = Path(__file__).resolve().parents[1]

# (sampler, parameters): the source's default first, then the curve. test_law keeps the
# default (temperature-1 laws, as the sources) in the HF engine.
ARMS: list[tuple[str, dict]] = [
    ("sps", {}),
    ("cactus", {"delta": 1.0}),
    ("cactus", {"delta": 0.25}),
    ("cactus", {"delta": 0.5}),
    ("cactus", {"delta": 2.0}),
    ("cactus_exact", {"delta": 1.0, "divergence": "kl"}),
    ("cactus_exact", {"delta": 0.25, "divergence": "kl"}),
    ("mentored", {"delta": 0.1}),
    ("mentored", {"delta": 0.2}),
    ("mentored", {"delta": 0.5}),
    ("lenience", {"l": 0.5}),
    ("lenience", {"l": 0.3}),
    ("lenience", {"l": 0.1}),
    ("chow", {"alpha": 0.5}),
    ("chow", {"alpha": 0.1}),
    ("diff", {"alpha": 0.5}),
    ("diff", {"alpha": 0.1}),
    ("opt", {"alpha": 0.5}),
    ("opt", {"alpha": 0.1}),
    ("tokenv1", {"alpha": 0.5}),
    ("tokenv1", {"alpha": 0.1}),
    ("tokenv2", {"alpha": 0.5}),
    ("tokenv2", {"alpha": 0.1}),
    ("tokenv3", {"alpha": 0.5}),
    ("tokenv3", {"alpha": 0.9}),
    ("fsd", {"threshold": 0.4, "div": "js"}),
    ("fsd", {"threshold": 0.6, "div": "js"}),
    ("fsd_reducible", {"threshold": 0.4, "div": "js"}),
    ("fsd_reducible", {"threshold": 0.6, "div": "js"}),
    ("bild", {"tau": 5.0}),
    ("bild", {"tau": 2.0}),
    ("bild", {"tau": 1.0}),
    ("ensemble", {"w": 0.7}),
    ("ensemble", {"w": 0.5}),
    ("tas", {"threshold": 0.09}),
    ("tas", {"threshold": 0.3}),
    # vLLM's window is min(6, m - 1): at the board's m = 2 that is W = 1 (W >= m never defers)
    ("fly", {"entropy_threshold": 0.3, "window": 1}),
    ("fly", {"entropy_threshold": 0.1, "window": 1}),
    # 2026's rules (docs/rules.md, F7-F9) at their sources' defaults, then a looser point
    ("topband", {"alpha": 0.2}),
    ("topband", {"alpha": 0.5}),
    ("topband_cascade", {"alpha": 0.5, "beta": 0.8}),
    ("topband_cascade", {"alpha": 0.5, "beta": 0.5}),
    ("additive", {"acceptance_threshold": 0.1}),
    ("additive", {"acceptance_threshold": 0.3}),
    ("greedy_margin", {"margin": 0.5}),
    ("greedy_margin", {"margin": 0.2}),
    # Cactus delta = 1 with each position-free guard (docs/rules.md, Guards)
    ("cactus", {"delta": 1.0, "stop": "exact"}),
    ("cactus", {"delta": 1.0, "near_top": 0.2}),
]


def run_arms(
    tasks, limit, max_new_tokens, m, data_dir, defaults_only, out_dir, reverse, rules=None
) -> None:
    from omegaconf import OmegaConf

    from cactus_bench.run import format_outcome, run, run_conf_from_dict
    from cactus_bench.samplers import RULES, make_sampler

    model = OmegaConf.to_container(OmegaConf.load(REPO / "configs/model/smollm2_135m.yaml"))
    arms = ARMS
    if defaults_only:  # each rule's first arm is its source's default
        arms = [arm for index, arm in enumerate(ARMS) if arm[0] not in {a[0] for a in ARMS[:index]}]
    if rules:
        unknown = sorted(set(rules) - {name for name, _ in ARMS})
        if unknown:
            raise SystemExit(f"--rules {' '.join(unknown)}: not on the board; choose from ARMS")
        arms = [arm for arm in arms if arm[0] in rules]
    for name, params in reversed(arms) if reverse else arms:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["demo", "gsm8k"])
    parser.add_argument("--limit", type=int, default=15)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--m", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--defaults-only", action="store_true", help="each rule's default only")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--reverse",
        action="store_true",
        help="arms last-first: a second worker on the same --out meets the first in the middle "
        "(each run skips an arm that already has a finished row)",
    )
    parser.add_argument("--rules", nargs="+", default=None, help="only these rules' arms")
    parser.add_argument("--out", default="results/rules")
    parser.add_argument(
        "--rows", default=None, help="the runs' CSV to report (default: <out>/rules.csv)"
    )
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
            args.reverse,
            args.rules,
        )
    rows_csv = Path(args.rows) if args.rows else out_dir / "rules.csv"
    if not rows_csv.is_file():
        parser.error(f"no runs CSV at {rows_csv}: run `make rules` first, or pass --rows")
    out_dir.mkdir(parents=True, exist_ok=True)
    for path in write_leaderboard(rows_csv, out_dir, Path(args.frontier_csv)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
