"""`python -m cactus_bench.frontier [--field value ...]` and `... plots --csv C --out D`.

Every FrontierConf field is an option (`--num-gsm8k 50`; lists comma-separated:
`--deltas 0.5,1,2`, `--prompts demo`; `--dtype none` for the pair's own). Errors print one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path

from cactus_bench.frontier.conf import FrontierConf


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cactus_bench.frontier", description=__doc__)
    hints = typing.get_type_hints(FrontierConf)
    defaults = FrontierConf()
    for item in dataclasses.fields(FrontierConf):
        kind = hints[item.name]
        default = getattr(defaults, item.name)
        parser.add_argument(
            f"--{item.name.replace('_', '-')}",
            dest=item.name,
            default=default,
            type=_converter(kind),
            help=f"default: {default}",
        )
    return parser


def _converter(kind):
    text = str(kind)
    if text.startswith("list["):
        inner = float if "float" in text else int if "int" in text else str
        return lambda value: [inner(v) for v in value.split(",") if v.strip()]
    if kind is bool:
        return lambda value: value.lower() in ("1", "true", "yes", "on")
    base = int if "int" in text else float if "float" in text else str
    if "None" in text:
        return lambda value: None if value.lower() in ("none", "null") else base(value)
    return base


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["plots"]:
            plots = argparse.ArgumentParser(prog="python -m cactus_bench.frontier plots")
            plots.add_argument("--csv", required=True)
            plots.add_argument("--out", default=None, help="default: <csv folder>/figures")
            args = plots.parse_args(argv[1:])
            import pandas as pd  # lazy: pandas for plots only

            from cactus_bench.frontier.plots import make_figures  # lazy: matplotlib for plots only
            from cactus_bench.frontier.plots_stop import missing_statistics  # lazy: matplotlib

            out = args.out or Path(args.csv).parent / "figures"
            for path in make_figures(args.csv, out):
                print(path)
            lacking = missing_statistics(pd.read_csv(args.csv, usecols=["statistic"]))
            if lacking:
                print(f"note: {args.csv} lacks {', '.join(lacking)} (written before them)")
            return 0
        conf = FrontierConf(**vars(_parser().parse_args(argv)))
        conf.check()
        from cactus_bench.frontier.pipeline import run_frontier  # lazy: torch after the checks

        outcome = run_frontier(conf)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(
            f"error: {str(error).splitlines()[0] if str(error) else type(error).__name__}",
            file=sys.stderr,
        )
        return 2 if isinstance(error, ValueError) else 1
    print(format_outcome(outcome))
    return 0


def run_from_run_conf(run_conf) -> str:
    """`python run.py experiment=frontier`: the frontier of the run's pair, data and sampling
    (FrontierConf.from_run), reported as the module CLI reports it."""
    from cactus_bench.frontier.pipeline import run_frontier  # lazy: keeps torch out of the CLI

    return format_outcome(run_frontier(FrontierConf.from_run(run_conf)))


def format_outcome(outcome) -> str:
    lines = [f"frontier: {outcome.num_positions:,} positions in {outcome.num_sequences} sequences"]
    lines += ["  " + line for line in outcome.highlights]
    lines.append(f"  wall time: {outcome.timings}")
    lines.append(f"results: {outcome.csv_path} (+ {len(outcome.figures)} figure files)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
