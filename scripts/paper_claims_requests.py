"""The paper-claims sweep's per-prompt table, from its records (`make paper-claims`, after the
sweep; cactus_bench/report/claims_requests.py says what it holds and how it is checked).

    python scripts/paper_claims_requests.py --data-dir ../shared/data \
        --csv results/paper_claims/paper_claims.csv
    python scripts/paper_claims_requests.py --lengths-only   # only the CSV's length columns

Re-scores every row's answers the way the run scored them: lm-eval's own `simple_evaluate` on
the IFEval task as the run loaded it, with the run's seeds (langdetect seeded too), and a model
that replays the recorded answers by document. So the per-document results are lm-eval's own,
with `random` in the state the run left it (two IFEval prompts draw a letter from it while they
are scored). Writes `<stem>.requests.csv` beside the CSV, then fills the CSV's length columns
from it (store/length_rebuild.py) for rows written before the run wrote them itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cactus_bench.report.claims_requests import load_requests, write_requests
from cactus_bench.store.length_rebuild import fill_length_columns
from cactus_bench.tasks.data import ensure_punkt, task_yaml_path


def replay_scorer(data_dir: Path):
    """score(run seed, answer texts in document order) -> lm-eval's per-document results
    ({prompt_level_strict_acc, inst_level_strict_acc: a list}), in document order."""
    import langdetect  # lazy: after ensure_punkt (lm-eval's IFEval module downloads otherwise)
    import lm_eval
    from lm_eval.api.model import LM

    from cactus_bench.tasks.evaluate import PAPER_GEN_KWARGS, lm_eval_seeds
    from cactus_bench.tasks.lm_eval_task import empty_task_manager, load_task
    from cactus_bench.tasks.paper_settings import apply_paper_settings
    from cactus_bench.tasks.specs import get_spec

    class Replay(LM):
        """Answers each request with the recorded answer of its document."""

        def __init__(self, answers: list[str]):
            super().__init__()
            self.answers = answers

        def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
            return [self.answers[request.doc_id] for request in requests]

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            raise NotImplementedError("IFEval generates")

        loglikelihood_rolling = loglikelihood

        def apply_chat_template(self, chat_history, add_generation_prompt: bool = True) -> str:
            return json.dumps(chat_history)

        @property
        def tokenizer_name(self) -> str:
            return "replay"

    spec = get_spec("ifeval")

    def score(seed: int, answers: list[str]) -> list[dict]:
        import random

        seeds = lm_eval_seeds(seed)
        langdetect.DetectorFactory.seed = 0  # as tasks/evaluate.py
        random.seed(seeds["random_seed"])  # as evaluate_task, before the task is loaded
        task = load_task(spec, task_yaml_path(spec, data_dir), data_dir)
        apply_paper_settings(task, dict(PAPER_GEN_KWARGS), "paper")
        results = lm_eval.simple_evaluate(
            model=Replay(answers),
            tasks=[task],
            task_manager=empty_task_manager(),
            limit=None,
            apply_chat_template=True,
            fewshot_as_multiturn=False,
            log_samples=True,
            **seeds,
        )
        samples = sorted(results["samples"][task.task_name], key=lambda s: s["doc_id"])
        return [
            {key: s[key] for key in ("prompt_level_strict_acc", "inst_level_strict_acc")}
            for s in samples
        ]

    return score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=Path("results/paper_claims/paper_claims.csv"))
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument(
        "--lengths-only",
        action="store_true",
        help="only fill the CSV's length columns from the committed per-prompt table",
    )
    args = parser.parse_args(argv)
    try:
        if args.lengths_only:
            return _fill_lengths(args.csv)
        if args.data_dir is None or not (args.data_dir / "ifeval").is_dir():
            raise ValueError("--data-dir must be the folder the sweep ran with (it has ifeval/)")
        ensure_punkt(args.data_dir)  # before lm-eval's IFEval module (it downloads otherwise)
        out = write_requests(args.csv, replay_scorer(args.data_dir))
        print(f"  {out}")
        return _fill_lengths(args.csv)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


def _fill_lengths(csv: Path) -> int:
    table = load_requests(csv)
    if table is None:
        raise ValueError(f"no per-prompt table beside {csv}: run this script with --data-dir")
    print(f"  {csv}: length columns of {fill_length_columns(csv, table)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
