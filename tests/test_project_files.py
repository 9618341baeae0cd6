"""The standard files a user and their tools read: licence, citation, pre-commit."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_licence_matches_pyproject():
    declared = PYPROJECT["project"]["license"]
    declared = declared if isinstance(declared, str) else declared.get("text", "")
    assert "MIT" in declared
    assert (REPO / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_citation_file_names_this_project_and_the_paper():
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"].startswith("1.2")
    assert citation["title"] and citation["authors"]
    assert citation["license"] == "MIT"
    assert any("Cactus" in reference["title"] for reference in citation["references"])


def test_pre_commit_runs_the_ruff_the_dev_extras_pin():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8"))
    (ruff_repo,) = [r for r in config["repos"] if "ruff" in r["repo"]]
    dev = [Requirement(text) for text in PYPROJECT["project"]["optional-dependencies"]["dev"]]
    pins = {r.name: r.specifier for r in dev}
    assert "pre-commit" in pins, "make setup should install pre-commit"
    assert str(pins["ruff"]) == "==" + ruff_repo["rev"].lstrip("v")
    assert {hook["id"] for hook in ruff_repo["hooks"]} == {"ruff-check", "ruff-format"}
