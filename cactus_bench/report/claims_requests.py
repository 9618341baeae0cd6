"""The claims report's per-prompt table, written once after the sweep from its records
(`make paper-claims`: scripts/paper_claims_requests.py, which brings lm-eval's IFEval checker).

The results CSV holds one row per arm with the headline metric per prompt (`score_by_prompt`,
IFEval's prompt-level strict accuracy). The claims also need, per prompt and arm, IFEval's
instruction-level strict result, whether the answer ended on the token budget, and the accepted
drafts and steps (a paired AL difference). Those live in `<stem>.records.jsonl` (git-ignored:
it holds the generated text), so this step writes them to `<stem>.requests.csv` beside the CSV,
one line per (run_id, prompt), which is committed and from which `make tables plots` rebuild the
claims page. Each answer is re-scored with lm-eval's own IFEval checker (`process_results`) on
the task's documents in order; its prompt-level result must equal the row's `score_by_prompt`
entry for every prompt, and its instructions followed must sum to the row's own lm-eval
`inst_level_strict_acc`, else this step refuses (the records and the row disagree).

Two IFEval prompts (documents 19 and 22) ask for a "letter" that is not one ("#", "!");
lm-eval's checker then draws a letter with Python's global `random` while it scores, so their
instruction results depend on the generator's state at that moment (the run's: "e" and "g").
A re-score that calls the checker document by document from another state gets other letters:
an earlier table differed from three rows' own metric by one instruction that way. So the
re-score runs lm-eval's own `simple_evaluate` with the run's seeds on a model that replays the
recorded answers (scripts/paper_claims_requests.py), and its lines must sum to the row's metric.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from cactus_bench.store.schema import RENAMED_COLUMNS

REQUEST_COLUMNS = (
    "run_id",
    "prompt",  # index in the task's document order
    "stop_reason",  # eos | stop | length (length: the answer ended on the token budget)
    "generated_tokens",
    "accepted",  # accepted drafts, all steps (empty for the verifier alone)
    "steps",  # verification steps (empty for the verifier alone)
    "prompt_strict",  # IFEval prompt-level strict: every instruction followed (0/1)
    "inst_followed",  # instructions followed (strict)
    "inst_total",  # instructions in the prompt
    # per-request diagnostics (engine/record.py), empty in lines scored before they existed
    "out_of_head",  # accepted drafts with q(x) < 0.2 max q (empty for the verifier alone)
    "repeat_share",  # share of the answer's 4-grams that occurred earlier in it
    "ends_in_loop",  # 1 when the answer ends in a repeated block, else 0
)


def requests_path(csv: Path) -> Path:
    return csv.with_name(csv.stem + ".requests.csv")


def _records(csv: Path) -> dict[str, list[dict]]:
    """{run_id: the run's own records in request order} from `<stem>.records.jsonl` ({} if none)."""
    path = csv.with_name(csv.stem + ".records.jsonl")
    if not path.is_file():
        return {}
    by_run: dict[str, dict[int, dict]] = {}
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            if entry.get("arm") == "spec":  # the run's own decode (the verifier's, alone)
                by_run.setdefault(entry["run_id"], {})[int(entry["request_index"])] = entry
    return {run: [found[i] for i in sorted(found)] for run, found in by_run.items()}


def write_requests(csv: Path, score) -> Path:
    """`<stem>.requests.csv` of every ok IFEval row of `csv` (module doc); returns its path.
    score(run seed, the answers in document order) -> lm-eval's per-document results in
    document order ({prompt_level_strict_acc, inst_level_strict_acc: a list}), scored as the
    run scored them."""
    rows = pd.read_csv(csv).rename(columns=RENAMED_COLUMNS)
    rows = rows[(rows.status == "ok") & (rows.task == "ifeval")]
    if rows.empty:
        raise ValueError(f"{csv} has no finished IFEval rows: run the sweep first")
    records = _records(csv)
    kept = load_requests(csv)
    lines = []
    for row in rows.itertuples():
        scores = json.loads(row.score_by_prompt)
        found = records.get(row.run_id, [])
        if not found and kept is not None:
            earlier = _committed_lines(kept, row, scores)
            if earlier is not None:
                lines.extend(earlier)
                continue
        if len(found) != len(scores) or int(row.repeats) != 1:
            raise ValueError(
                f"run {row.run_id} ({row.sampler}) has {len(found)} records for {len(scores)} "
                "prompts (one repeat each expected) and no complete lines in the per-prompt "
                "table: run this step where the run's records are"
            )
        results = score(int(row.seed), [record["text"] for record in found])
        followed_total, n = 0, len(scores)
        for index, (record, expected, result) in enumerate(
            zip(found, scores, results, strict=True)
        ):
            strict = float(result["prompt_level_strict_acc"])
            if not math.isclose(strict, float(expected)):
                raise ValueError(
                    f"run {row.run_id} ({row.sampler}) prompt {index}: IFEval re-scores its "
                    f"answer {strict:g}, the row says {expected}: records and row disagree"
                )
            speculative = bool(record.get("num_draft_tokens"))
            followed = result["inst_level_strict_acc"]
            followed_total += int(sum(followed))
            lines.append(
                {
                    "run_id": row.run_id,
                    "prompt": index,
                    "stop_reason": record["stop_reason"],
                    "generated_tokens": len(record["output_ids"]),
                    "accepted": sum(record["accepted_per_step"]) if speculative else None,
                    "steps": len(record["accepted_per_step"]) if speculative else None,
                    "prompt_strict": int(strict),
                    "inst_followed": int(sum(followed)),
                    "inst_total": len(followed),
                    "out_of_head": record.get("out_of_head_commits"),
                    "repeat_share": record.get("repeat_share"),
                    "ends_in_loop": _flag(record.get("ends_in_loop")),
                }
            )
        check_instruction_total(row, followed_total, sum(x["inst_total"] for x in lines[-n:]))
    out = requests_path(csv)
    table = pd.DataFrame(lines, columns=list(REQUEST_COLUMNS))
    integers = {name: "Int64" for name in ("accepted", "steps", "out_of_head", "ends_in_loop")}
    table.astype(integers).to_csv(out, index=False)
    return out


def lm_eval_instructions(row) -> float | None:
    """The row's own lm-eval instruction-level strict accuracy (metrics_json), or None."""
    cell = getattr(row, "metrics_json", None)
    if not isinstance(cell, str):
        return None
    return json.loads(cell).get("inst_level_strict_acc,none")


def check_instruction_total(row, followed: int, total: int) -> None:
    """Refuses when the instructions followed differ from the row's own lm-eval metric."""
    accuracy = lm_eval_instructions(row)
    if accuracy is not None and round(accuracy * total) != followed:
        raise ValueError(
            f"run {row.run_id} ({row.sampler}): the per-prompt lines follow {followed} of "
            f"{total} instructions, the row's lm-eval metric {round(accuracy * total)}: "
            "re-score with `random` seeded as the run seeded it (module doc)"
        )


def _committed_lines(kept: pd.DataFrame, row, scores: list) -> list[dict] | None:
    """The committed table's lines of `row`, when they cover every prompt once (else None);
    a line whose prompt-level result differs from the row's refuses, as a re-score would."""
    if int(row.repeats) != 1:  # one line per prompt holds one answer: a repeated row re-scores
        return None
    mine = kept[kept.run_id == row.run_id].sort_values("prompt")
    if mine.prompt.tolist() != list(range(len(scores))):
        return None
    for index, strict, expected in zip(mine.prompt, mine.prompt_strict, scores, strict=True):
        if not math.isclose(float(strict), float(expected)):
            raise ValueError(
                f"run {row.run_id} ({row.sampler}) prompt {index}: the per-prompt table says "
                f"{strict:g}, the row says {expected}: the table and the CSV disagree"
            )
    check_instruction_total(row, int(mine.inst_followed.sum()), int(mine.inst_total.sum()))
    return [
        {column: (None if pd.isna(value) else value) for column, value in line.items()}
        for line in mine.reindex(columns=list(REQUEST_COLUMNS)).to_dict("records")
    ]


def _flag(value) -> int | None:
    return None if value is None else int(bool(value))


def load_requests(csv: Path) -> pd.DataFrame | None:
    """The per-prompt table beside `csv`, or None when the sweep's step has not written it."""
    path = requests_path(csv)
    return pd.read_csv(path) if path.is_file() else None
