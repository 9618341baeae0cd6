"""The paper-claims sweep's per-prompt table, from its records (`make paper-claims`, after the
sweep; cactus_bench/report/claims_requests.py says what it holds and how it is checked).

    python scripts/paper_claims_requests.py --data-dir ../shared/data \
        --csv results/paper_claims/paper_claims.csv

Re-scores every answer with lm-eval's own IFEval checker on the task's documents, in the run's
order (langdetect seeded as the run seeds it), and writes `<stem>.requests.csv` beside the CSV.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cactus_bench.report.claims_requests import write_requests
from cactus_bench.tasks.data import ensure_punkt


def ifeval_documents(data_dir: Path) -> list[dict]:
    path = data_dir / "ifeval" / "input_data.jsonl"
    if not path.is_file():
        raise ValueError(f"{path} is missing: pass --data-dir, the folder the sweep ran with")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=Path("results/paper_claims/paper_claims.csv"))
    parser.add_argument("--data-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        documents = ifeval_documents(args.data_dir)
        ensure_punkt(args.data_dir)  # before lm-eval's IFEval module (it downloads otherwise)
        import langdetect  # lazy: after the argument checks
        from lm_eval.tasks.ifeval.utils import process_results  # lazy: after ensure_punkt

        langdetect.DetectorFactory.seed = 0  # as tasks/evaluate.py: the same text, one score
        out = write_requests(args.csv, documents, lambda doc, text: process_results(doc, [text]))
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"  {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
