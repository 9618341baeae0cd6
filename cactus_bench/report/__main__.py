"""`python -m cactus_bench.report {tables,plots,all,batch,batch-jobs} [--csv GLOB ...] [--out DIR]`.

Reads results CSVs only. Tables go to OUT/tables (Markdown + LaTeX), figures to OUT/figures
(PNG + PDF). Quote globs so the CLI expands them: --csv 'results/demo/*.csv'. `batch` writes the
batch sweep's report (report/batch_page.py) from one CSV and its steps file; `--cost-table` adds a
forecast from another device's step costs. `batch-jobs` prints the held-out task's runs, one
line of run.py overrides each: per (rule, batch) the m the demo task chose (report/batch.py).
CSVs of the paper-claims sweep (experiment=paper_claims) also get its table and figure
(report/claims_page.py), from the CSV and the per-prompt table beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cactus_bench.report import (
    DEFAULT_REFERENCE,
    aggregate,
    load_reference,
    load_results,
    make_figures,
    write_tables,
)
from cactus_bench.report.batch import heldout_jobs, sweep_rows
from cactus_bench.report.batch_page import write_batch_report
from cactus_bench.report.claims_figure import write_claims_figure
from cactus_bench.report.claims_page import claims_csvs, claims_rows, write_claims_tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m cactus_bench.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("what", choices=("tables", "plots", "all", "batch", "batch-jobs"))
    parser.add_argument(
        "--csv",
        action="append",
        default=None,
        metavar="PATH_OR_GLOB",
        help="results CSV(s); repeatable (default: results/*.csv)",
    )
    parser.add_argument(
        "--out",
        default="results",
        type=Path,
        help="output root: writes OUT/tables and OUT/figures (default: results)",
    )
    parser.add_argument(
        "--reference",
        default=str(DEFAULT_REFERENCE),
        help="paper values YAML, or 'none' to leave the paper out",
    )
    parser.add_argument(
        "--cost-table", type=Path, default=None, help="batch: another device's step costs (CSV)"
    )
    args = parser.parse_args(argv)
    if args.what == "batch-jobs":
        try:
            (csv,) = args.csv or ["results/batch/batch_sweep.csv"]
            jobs = heldout_jobs(sweep_rows(Path(csv)))
        except (ValueError, FileNotFoundError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print("\n".join(" ".join(job) for job in jobs))
        return 0
    if args.what == "batch":
        try:
            (csv,) = args.csv or ["results/batch/batch_sweep.csv"]
            written = write_batch_report(Path(csv), args.out, cost_table=args.cost_table)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print("\n".join(f"  {path}" for path in written))
        return 0
    try:
        frame = load_results(args.csv or ["results/*.csv"])
        agg = aggregate(frame)
        written = []
        if args.what in ("tables", "all"):
            reference = None if args.reference == "none" else load_reference(args.reference)
            written += write_tables(agg, reference, args.out / "tables")
            for csv in claims_csvs(frame):
                written += write_claims_tables(csv, args.out / "tables", reference)
        if args.what in ("plots", "all"):
            written += make_figures(agg, args.out / "figures")
            for csv in claims_csvs(frame):
                written += write_claims_figure(csv, claims_rows(csv), args.out / "figures")
    except ValueError as error:  # bad input: one line naming the fix, no traceback
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"{len(frame)} rows from {frame['source_file'].nunique()} CSV(s) -> "
        f"{len(written)} files under {args.out}/"
    )
    for path in written:
        print(f"  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
