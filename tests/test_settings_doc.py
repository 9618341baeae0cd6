"""The run settings' generated text (configs/config.yaml's comment, docs/configuration.md's
table) matches the settings table, and the check catches a stale copy."""

from __future__ import annotations

from cactus_bench.run import settings_doc
from cactus_bench.run_settings import OPTIONS


def test_the_committed_files_are_the_generated_ones():
    assert settings_doc.main(["--check"]) == 0, "run `make docs`"


def test_every_option_has_one_line_in_each(tmp_path):
    yaml_text = "\n".join(settings_doc.yaml_lines())
    table = "\n".join(settings_doc.markdown_lines())
    for setting in OPTIONS:
        assert yaml_text.count(f"\n# {setting.key} (") == 1, setting.key
        assert table.count(f"| `{setting.key}` |") == 1, setting.key


def test_check_flags_a_stale_copy_and_rewrite_mends_it(tmp_path, monkeypatch):
    yaml_copy, doc_copy = tmp_path / "config.yaml", tmp_path / "configuration.md"
    yaml_copy.write_text(settings_doc.CONFIG_YAML.read_text().replace("# m (int", "# m (float"))
    doc_copy.write_text(settings_doc.CONFIGURATION_MD.read_text())
    monkeypatch.setattr(settings_doc, "REPO", tmp_path)
    monkeypatch.setattr(
        settings_doc,
        "targets",
        lambda: {yaml_copy: settings_doc.yaml_lines(), doc_copy: settings_doc.markdown_lines()},
    )
    assert settings_doc.main(["--check"]) == 1
    assert settings_doc.main([]) == 0
    assert settings_doc.main(["--check"]) == 0
    assert yaml_copy.read_text() == settings_doc.CONFIG_YAML.read_text()
