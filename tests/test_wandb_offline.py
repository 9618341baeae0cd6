"""logger=wandb as its users expect, checked offline by reading the run's own files back:
group and tags, the row in the summary, per-step histograms and a per-prompt table in one log
call, the CSV row and records as an artifact; and credentials found where wandb finds them."""

from __future__ import annotations

import csv
import json

import pytest

pytest.importorskip("wandb")

from helpers.runs import csv_rows, tiny_conf  # noqa: E402
from wandb_files import offline_run  # noqa: E402

from cactus_bench.run import run  # noqa: E402
from cactus_bench.store.schema import COLUMNS  # noqa: E402
from cactus_bench.store.wandb_mirror import PROMPT_COLUMNS, wandb_credentials  # noqa: E402


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    for name in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_MODE", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no.netrc"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))  # artifact staging
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_credentials_are_found_where_wandb_looks(tmp_path, monkeypatch, no_credentials):
    assert wandb_credentials() is None
    netrc = tmp_path / "no.netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    assert wandb_credentials() == f"netrc ({netrc})"  # what `wandb login` writes
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert wandb_credentials() is None  # a key for another host does not count
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert wandb_credentials() == "WANDB_API_KEY"


def test_a_run_logs_group_tags_histograms_table_and_artifact(tmp_path, capsys, no_credentials):
    conf = tiny_conf(tmp_path, "logger=wandb", "sampler=cactus", "experiment_name=sweep_a")
    outcome = run(conf)
    assert outcome.status == "ok"
    assert capsys.readouterr().out.count("logging offline") == 1
    (row,) = csv_rows(outcome.csv_path)
    logged = offline_run(tmp_path / "results")

    assert logged["group"] == "sweep_a"
    assert logged["tags"] == ["pair:tiny_random", "task:demo", "rule:cactus"]
    assert logged["summary"]["demo/al"] == pytest.approx(float(row["al"]))
    assert logged["summary"]["demo/n_prompts"] == 2

    (step,) = [h for h in logged["history"] if "demo/prompts" in h]  # one log call in all
    hist = step["demo/accepted_per_step"]
    assert hist["_type"] == "histogram" and sum(hist["values"]) == int(row["num_steps"])
    table = json.loads((logged["files"] / step["demo/prompts"]["path"]).read_text())
    assert table["columns"] == list(PROMPT_COLUMNS) and len(table["data"]) == 2
    by_prompt = json.loads(row["score_by_prompt"])
    assert [line[1] for line in table["data"]] == by_prompt
    assert sum(line[3] for line in table["data"]) == int(row["draft_tokens_accepted"])

    artifact = logged["artifacts"][f"results-{row['run_id']}"]
    assert artifact["type"] == "results"
    with open(artifact["files"]["row.csv"], newline="") as handle:
        (mirrored,) = list(csv.DictReader(handle))
    assert list(mirrored) == COLUMNS and mirrored["run_id"] == row["run_id"]
    assert mirrored["al"] == row["al"] and mirrored["config_hash"] == row["config_hash"]
    lines = artifact["files"]["records.jsonl"].read_text().splitlines()
    arms = [json.loads(line)["arm"] for line in lines]
    assert arms == ["spec", "spec", "baseline", "baseline"]
