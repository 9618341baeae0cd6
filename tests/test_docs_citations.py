"""Every formula the code cites is in the repository: a "docs/rules.md, F<n>" citation names a
section of docs/rules.md, and no file cites a document the repository does not hold."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RULES_DOC = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
SOURCES = sorted(
    [*(REPO / "cactus_bench").rglob("*.py"), *(REPO / "scripts").glob("*.py")]
    + [*(REPO / "tests").glob("*.py"), *(REPO / "docs").glob("*.md"), REPO / "README.md"]
)


def test_every_cited_formula_section_exists():
    cited = {
        (path.name, section)
        for path in SOURCES
        for section in re.findall(r"docs/rules\.md, (F\d+)", path.read_text(encoding="utf-8"))
    }
    assert cited, "no file cites docs/rules.md's formulas"
    for name, section in sorted(cited):
        assert re.search(rf"^### {section}\. ", RULES_DOC, re.MULTILINE), (name, section)


def test_no_file_cites_the_notes_outside_the_repository():
    others = [path for path in SOURCES if path != Path(__file__).resolve()]
    citing = [p.name for p in others if "RULES.md" in p.read_text(encoding="utf-8")]
    assert citing == [], f"cite docs/rules.md's formulas instead: {citing}"
