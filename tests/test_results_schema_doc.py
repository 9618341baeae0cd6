"""docs/results-schema.md is generated from store/columns.py and must match it."""

from __future__ import annotations

import re

from cactus_bench.store import schema_doc
from cactus_bench.store.schema import COLUMNS, RENAMED_COLUMNS, SCHEMA


def test_the_committed_page_is_the_generated_one():
    assert schema_doc.DOC_PATH.read_text(encoding="utf-8") == schema_doc.render(), (
        "docs/results-schema.md is out of date: run `python -m cactus_bench.store.schema_doc`"
    )


def test_every_column_and_rename_is_documented_once():
    text = schema_doc.render()
    for name in COLUMNS:
        rows = re.findall(rf"^\| `{name}`( \(config\))? \|", text, flags=re.MULTILINE)
        assert len(rows) == 1, name
    for old, new in RENAMED_COLUMNS.items():
        assert old not in SCHEMA and new in SCHEMA, (old, new)
        assert f"| `{old}` | `{new}` |" in text


def test_check_mode_flags_a_stale_page(tmp_path):
    page = tmp_path / "results-schema.md"
    page.write_text(schema_doc.render().replace("n_prompts", "n_samples"), encoding="utf-8")
    assert schema_doc.main(["--check", "--out", str(page)]) == 1
    assert schema_doc.main(["--out", str(page)]) == 0
    assert schema_doc.main(["--check", "--out", str(page)]) == 0
