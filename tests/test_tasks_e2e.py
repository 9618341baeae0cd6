"""Each task end to end: the tiny random pair decodes lm-eval's real prompts, offline from
../shared/data (skipped with the reason when that folder is absent), limit=2, a few tokens each.

Also: a GPQA run leaves nothing new in `git status` and no plaintext GPQA in the repository.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from cactus_bench.engine import (
    AutoregressiveDecoder,
    RequestRecord,
    SamplingParams,
    SpeculativeDecoder,
)
from cactus_bench.models.tiny import make_tiny_pair
from cactus_bench.samplers import make_sampler
from cactus_bench.tasks import TASK_NAMES, TASK_SPECS, evaluate_task
from cactus_bench.tasks.data import DATA_DIR_ENV, gpqa_password, read_gpqa_diamond

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get(DATA_DIR_ENV) or REPO.parent / "shared" / "data")
needs_shared_data = pytest.mark.skipif(
    not (SHARED_DATA / "gsm8k/test.jsonl").is_file(),
    reason=f"offline data folder {SHARED_DATA} absent (set {DATA_DIR_ENV} to a copy)",
)
NUM_DRAFT = 4
MAX_GEN_TOKS = 8
METRIC_KEYS = {
    "gsm8k": {
        "exact_match,strict-match",
        "exact_match,flexible-extract",
        "exact_match,flexible-extract-last",
    },
    "gpqa": {
        "exact_match,strict-match",
        "exact_match,flexible-extract",
        "exact_match,flexible-extract-last",
    },
    "ifeval": {
        "prompt_level_strict_acc,none",
        "inst_level_strict_acc,none",
        "prompt_level_loose_acc,none",
        "inst_level_loose_acc,none",
    },
}
METRIC_KEYS["demo"] = METRIC_KEYS["ifeval"]


@pytest.fixture(scope="module")
def tiny():
    drafter, verifier, tokenizer = make_tiny_pair(seed=0)
    sampling = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)
    decoder = SpeculativeDecoder(
        drafter,
        verifier,
        tokenizer,
        make_sampler("cactus", delta=1.0),
        num_draft_tokens=NUM_DRAFT,
        sampling=sampling,
    )
    baseline = AutoregressiveDecoder(verifier, tokenizer, sampling=sampling)
    return decoder, baseline, tokenizer


def run(task, tiny, data_dir=SHARED_DATA, **kwargs):
    decoder, baseline, tokenizer = tiny
    return evaluate_task(
        task,
        decoder,
        baseline=baseline,
        tokenizer=tokenizer,
        data_dir=data_dir,
        limit=2,
        max_gen_toks=MAX_GEN_TOKS,
        show_progress=False,
        **kwargs,
    )


@needs_shared_data
@pytest.mark.parametrize("task", TASK_NAMES)
def test_task_end_to_end_on_the_tiny_pair(task, tiny):
    res = run(task, tiny)
    assert METRIC_KEYS[task] <= set(res.metrics)
    assert res.score_name == TASK_SPECS[task].score_name and 0.0 <= res.score <= 1.0
    assert res.score == res.metrics[res.score_name] and res.n_samples == 2
    assert len(res.records) == len(res.baseline_records) == 2
    for spec_record, base_record in zip(res.records, res.baseline_records, strict=True):
        assert isinstance(spec_record, RequestRecord) and isinstance(base_record, RequestRecord)
        assert spec_record.num_draft_tokens == NUM_DRAFT and base_record.num_draft_tokens == 0
        assert spec_record.prompt_ids == base_record.prompt_ids  # both arms, the same request
        assert spec_record.seed == base_record.seed
        assert 1 <= spec_record.num_generated <= MAX_GEN_TOKS and spec_record.num_steps >= 1
        assert spec_record.sampling == {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
    headline_filter = res.score_name.split(",")[1]
    assert [s["doc_id"] for s in res.samples if s["filter"] == headline_filter] == [0, 1]


def test_demo_runs_without_a_data_folder(tiny, monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    first = run("demo", tiny, data_dir=None)
    again = run("demo", tiny, data_dir=None)
    assert first.data_source == "package" and first.n_samples == 2
    assert [r.output_ids for r in first.records] == [r.output_ids for r in again.records]
    assert first.metrics == again.metrics


def files_containing(root: Path, snippets: list[bytes]) -> list[Path]:
    """Files under root (outside .git, .venv and caches) that contain a snippet, whitespace
    normalised (runs of spaces and newlines compare equal)."""
    skip_dirs = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules"}
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip_dirs]
        for name in files:
            path = Path(folder, name)
            if path.is_symlink() or path.stat().st_size > 50_000_000:
                continue
            content = b" ".join(path.read_bytes().split())
            if any(snippet in content for snippet in snippets):
                found.append(path)
    return found


def test_the_plaintext_scan_can_fail(tmp_path):
    canary = b"a canary sentence that stands in for a question, spread over lines"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/notes.csv").write_bytes(canary.replace(b" over ", b"\n  over "))
    assert files_containing(tmp_path, [canary[:48]]) == [tmp_path / "sub/notes.csv"]


@needs_shared_data
def test_gpqa_leaves_no_file_and_no_plaintext_in_the_repo(tiny):
    def git_status() -> set[str]:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return set(out.splitlines())

    before = git_status()
    res = run("gpqa", tiny)
    assert res.n_samples == 2 and git_status() <= before
    # Distinctive snippets of the first questions, held in memory only.
    rows = read_gpqa_diamond(SHARED_DATA / "gpqa/dataset.zip", gpqa_password())
    snippets = [" ".join(row["Question"].split())[:48].encode() for row in rows[:3]]
    assert all(len(snippet) >= 40 for snippet in snippets)
    assert files_containing(REPO, snippets) == []
