"""Reports from results CSVs only: the paper's Table 1 layout, a speedup table, figures.

```python
from cactus_bench.report import load_results, aggregate, load_reference, write_tables
agg = aggregate(load_results(["results/*.csv"]))
write_tables(agg, load_reference(), "results/tables"); make_figures(agg, "results/figures")
```
CLI: `python -m cactus_bench.report {tables,plots,all} --csv 'results/*.csv' --out results`.
"""

from pathlib import Path

from cactus_bench.report.load import aggregate, load_results, read_results_csv
from cactus_bench.report.plots import FIGURES, make_figures
from cactus_bench.report.reference import DEFAULT_REFERENCE, Reference, load_reference
from cactus_bench.report.render import to_latex, to_markdown
from cactus_bench.report.speedup import speedup_table
from cactus_bench.report.tables import Table, blocks, table1


def write_tables(agg, reference: Reference | None, out_dir: str | Path) -> list[Path]:
    """table1.md/.tex and speedup.md/.tex under out_dir; returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, tables in (
        ("table1", table1(agg, reference)),
        ("speedup", speedup_table(agg, reference)),
    ):
        if not tables:
            tables = [
                Table(
                    title=f"{name}: no rows to show",
                    groups=[],
                    columns=["-"],
                    notes=["The input CSVs have no speculative rows for this table."],
                )
            ]
        for suffix, render, joiner in ((".md", to_markdown, "\n"), (".tex", to_latex, "\n")):
            path = out_dir / f"{name}{suffix}"
            path.write_text(joiner.join(render(t) for t in tables), encoding="utf-8")
            written.append(path)
    return written


__all__ = [
    "load_results",
    "read_results_csv",
    "aggregate",
    "load_reference",
    "Reference",
    "DEFAULT_REFERENCE",
    "table1",
    "speedup_table",
    "to_markdown",
    "to_latex",
    "write_tables",
    "make_figures",
    "FIGURES",
    "blocks",
]
