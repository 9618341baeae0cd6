"""Fill the length columns (store/length.py) of rows written before they existed, from a
per-prompt table that holds each answer's length and stop reason (the paper-claims sweep's
`<stem>.requests.csv`: run_id, prompt, stop_reason, generated_tokens).

Each row is paired with its baseline as the run paired it: a `baseline=cached` row with the
verifier-only row of the same prompts (prompts_hash) in the same file; a verifier-only row gets
its own mean length and cap-out share and no ratio. The intervals come from the row's own prompt
resamples (intervals.py: `ci_resamples` draws from the run seed's bootstrap stream), so a row
rebuilt here carries what the run would have written. A row without a complete per-prompt table
keeps empty cells: lacking the data, never 0. The per-request diagnostics need the records'
token ids and step counts, which such a table does not hold: they stay empty.

    python scripts/paper_claims_requests.py --lengths-only   # results/paper_claims by default
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pandas as pd

from cactus_bench.store.bootstrap import bootstrap_rng, resample_counts
from cactus_bench.store.columns import COLUMNS, RENAMED_COLUMNS
from cactus_bench.store.length import CAPPED, LENGTH_COLUMNS, length_columns_from_arrays
from cactus_bench.store.schema import format_cell


def _arrays(table: pd.DataFrame, run_id: str, n: int) -> dict[str, np.ndarray] | None:
    """{gen, capped, requests} [n] of one run from the per-prompt table, or None if incomplete."""
    mine = table[table.run_id == run_id].sort_values("prompt")
    if mine.prompt.tolist() != list(range(n)):
        return None
    return {
        "gen": mine.generated_tokens.to_numpy(float),
        "capped": (mine.stop_reason == CAPPED).to_numpy(float),
        "requests": np.ones(n),
    }


def rebuilt_length_cells(rows: pd.DataFrame, table: pd.DataFrame) -> dict[str, dict[str, str]]:
    """{run_id: {column: cell}} of LENGTH_COLUMNS for every ok row of `rows` (the CSV read as
    text) that the per-prompt table covers."""
    out = {}
    verifier = rows[(rows.status == "ok") & (rows.sampler == "verifier")]
    for row in rows[rows.status == "ok"].itertuples():
        n = int(row.n_prompts)
        spec = _arrays(table, row.run_id, n)
        if spec is None:
            continue
        base = None
        if row.sampler != "verifier":
            same = verifier[verifier.prompts_hash == row.prompts_hash]
            if len(same) != 1:
                continue  # no single baseline row to pair with: leave the row as it is
            base = _arrays(table, same.iloc[0].run_id, n)
            if base is None:
                continue
        resamples = None if pd.isna(row.ci_resamples) else int(row.ci_resamples)
        counts = (
            None
            if resamples is None
            else resample_counts(n, resamples, bootstrap_rng(int(row.seed)))
        )
        values = length_columns_from_arrays(spec, base, counts)
        out[row.run_id] = {name: format_cell(name, values[name]) for name in LENGTH_COLUMNS}
    return out


def fill_length_columns(csv_path: Path, table: pd.DataFrame) -> int:
    """Rewrite `csv_path` with the length columns of the rows the table covers (the header
    widened with any current column it lacks, as the store widens it); returns the rows filled."""
    text = csv_path.read_text(encoding="utf-8")
    lines = list(csv.reader(io.StringIO(text)))
    header = [RENAMED_COLUMNS.get(name, name) for name in lines[0]]
    header += [name for name in COLUMNS if name not in header]
    frame = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).rename(
        columns=RENAMED_COLUMNS
    )
    frame = frame.replace("", np.nan)
    frame["n_prompts"] = frame["n_prompts"].astype(float)
    cells = rebuilt_length_cells(frame, table)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for line in lines[1:]:
        row = dict(zip(header, line + [""] * (len(header) - len(line)), strict=True))
        row.update(cells.get(row["run_id"], {}))
        writer.writerow([row[name] for name in header])
    csv_path.write_text(out.getvalue(), encoding="utf-8")
    return len(cells)
