"""The generated text about the run's settings (configs/config.yaml's comment; the run settings
and config groups tables of docs/configuration.md; docs/rules.md's rules table) matches where
each is declared, names real sources, and the check catches a stale copy."""

from __future__ import annotations

from cactus_bench.run import settings_doc
from cactus_bench.run_settings import OPTIONS
from cactus_bench.run_settings.groups import CONFIG_GROUPS, group_folders, group_options
from cactus_bench.samplers.catalogue import RULES, VERIFIER_ONLY


def test_the_committed_files_are_the_generated_ones():
    assert settings_doc.main(["--check"]) == 0, "run `make docs`"


def test_every_option_has_one_line_in_each(tmp_path):
    yaml_text = "\n".join(settings_doc.yaml_lines())
    table = "\n".join(settings_doc.markdown_lines())
    for setting in OPTIONS:
        assert yaml_text.count(f"\n# {setting.key} (") == 1, setting.key
        assert table.count(f"| `{setting.key}` |") == 1, setting.key


def test_the_markers_name_the_files_the_blocks_come_from():
    """The settings table's module declares RUN_SETTINGS; the catalogue's lists RULES."""
    settings = settings_doc.REPO / settings_doc.SETTINGS.source
    assert "RUN_SETTINGS" in settings.read_text(encoding="utf-8")
    for block in (settings_doc.GROUPS, settings_doc.RULE_TABLE):
        named = [word for word in block.source.split() if "/" in word and "<" not in word]
        assert named, block.source
        assert all((settings_doc.REPO / word).exists() for word in named), block.source


def test_every_config_folder_is_a_declared_group_and_every_option_is_described():
    assert group_folders() == {group.name for group in CONFIG_GROUPS}
    for group in CONFIG_GROUPS:
        options = group_options(group.name)
        assert options, group.name
        assert all(text.strip() for _, text in options), group.name


def test_the_group_table_lists_every_option_and_the_rules_table_every_rule():
    groups = "\n".join(settings_doc.group_lines())
    for group in CONFIG_GROUPS:
        for option, _ in group_options(group.name):
            if not (group.name == "sampler" and option in RULES):
                assert groups.count(f"| `{option}` |") >= 1, (group.name, option)
    rules = "\n".join(settings_doc.rule_lines())
    for name in (*RULES, VERIFIER_ONLY):
        assert rules.count(f"| `{name}` |") == 1, name
    assert "`delta` (1.0)" in rules  # a preset's ${shortcut:delta,1.0} reads as its value


def test_check_flags_a_stale_copy_and_rewrite_mends_it(tmp_path, monkeypatch):
    yaml_copy, doc_copy = tmp_path / "config.yaml", tmp_path / "configuration.md"
    rules_copy = tmp_path / "rules.md"
    yaml_copy.write_text(settings_doc.CONFIG_YAML.read_text().replace("# m (int", "# m (float"))
    doc_copy.write_text(settings_doc.CONFIGURATION_MD.read_text().replace("`tiny_random`", "`x`"))
    rules_copy.write_text(settings_doc.RULES_MD.read_text())
    monkeypatch.setattr(settings_doc, "REPO", tmp_path)
    monkeypatch.setattr(
        settings_doc,
        "targets",
        lambda: {
            yaml_copy: [settings_doc.CONFIG_COMMENT],
            doc_copy: [settings_doc.SETTINGS, settings_doc.GROUPS],
            rules_copy: [settings_doc.RULE_TABLE],
        },
    )
    assert settings_doc.main(["--check"]) == 1
    assert settings_doc.main([]) == 0
    assert settings_doc.main(["--check"]) == 0
    assert yaml_copy.read_text() == settings_doc.CONFIG_YAML.read_text()
    assert doc_copy.read_text() == settings_doc.CONFIGURATION_MD.read_text()
