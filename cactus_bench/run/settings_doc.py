"""The run's settings as people read them, written from where they are declared so that they
never drift from it: the comment block in configs/config.yaml and the run settings table in
docs/configuration.md (from the settings table, cactus_bench/run_settings/table.py), the config
groups table in docs/configuration.md (from configs/<group>/ and run_settings/groups.py) and the
acceptance rules table in docs/rules.md (from the sampler catalogue and configs/sampler/).

    python -m cactus_bench.run.settings_doc          # rewrite them all (make docs)
    python -m cactus_bench.run.settings_doc --check  # exit 1 when one is out of date

Each file keeps its own text; only the part between a block's two marker lines is generated.
tests/test_settings_doc.py runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from cactus_bench.run_settings import OPTIONS, Setting
from cactus_bench.run_settings.groups import (
    CONFIG_GROUPS,
    CONFIGS_DIR,
    group_default,
    group_options,
)
from cactus_bench.samplers.catalogue import RULES, VERIFIER_ONLY
from cactus_bench.store.schema_doc import markdown_cell

REPO = Path(__file__).resolve().parents[2]
CONFIG_YAML = REPO / "configs" / "config.yaml"
CONFIGURATION_MD = REPO / "docs" / "configuration.md"
RULES_MD = REPO / "docs" / "rules.md"
SHORTCUT = re.compile(r"^\$\{shortcut:\w+,(.*)\}$")  # a preset's `${shortcut:delta,1.0}`


@dataclass(frozen=True)
class Block:
    """One generated part of a file: its name and source name its marker lines."""

    name: str  # e.g. "run settings"
    source: str  # the paths it is generated from, as the begin marker names them
    lines: Callable[[], list[str]]  # the block, marker lines included

    @property
    def begin(self) -> str:
        return f"{self.name}: generated from {self.source} by `make docs`"

    @property
    def end(self) -> str:
        return f"end of the generated {self.name}"


def _type_text(setting: Setting) -> str:
    kind = setting.option.type
    names = [getattr(t, "__name__", str(t)) for t in getattr(kind, "__args__", (kind,))]
    return " | ".join("null" if name == "NoneType" else name for name in names)


def _default_text(setting: Setting) -> str:
    default = setting.option.default
    if default is None:
        return "null"
    return str(default).lower() if isinstance(default, bool) else str(default)


def _roles(setting: Setting) -> str:
    """Where the value goes: the CSV column, the config hash, the report's grouping."""
    roles = []
    if setting.csv_column:
        roles.append(f"column `{setting.csv_column}`")
    if setting.hashed:
        roles.append("hashed")
    if setting.grouped:
        roles.append("grouped")
    return ", ".join(roles) or "-"


def yaml_lines() -> list[str]:
    """configs/config.yaml's comment block: one line per option."""
    lines = [f"# ---- {SETTINGS.begin} ----"]
    for setting in OPTIONS:
        check = setting.option.check
        allowed = f"; must be {check.rule}" if check else ""
        text = f"{setting.key} ({_type_text(setting)}, default {_default_text(setting)}{allowed}): "
        lines += textwrap.wrap(
            text + setting.doc, width=100, initial_indent="# ", subsequent_indent="#     "
        )
    lines.append(f"# ---- {SETTINGS.end} ----")
    return lines


def markdown_lines() -> list[str]:
    """docs/configuration.md's settings table."""
    lines = [
        f"<!-- {SETTINGS.begin} -->",
        "",
        "| setting | type | default | allowed | meaning | recorded |",
        "|---|---|---|---|---|---|",
    ]
    for setting in OPTIONS:
        check = setting.option.check
        allowed = markdown_cell(check.rule) if check else "any"
        lines.append(
            f"| `{setting.key}` | {_type_text(setting).replace('|', 'or')} | "
            f"`{_default_text(setting)}` | {allowed} | {markdown_cell(setting.doc)}"
            f" | {_roles(setting)} |"
        )
    lines += ["", f"<!-- {SETTINGS.end} -->"]
    return lines


def group_lines() -> list[str]:
    """docs/configuration.md's config groups table: each group, its default and its options. The
    sampler group's rules are the rules table's (docs/rules.md); its other options are here."""
    lines = [
        f"<!-- {GROUPS.begin} -->",
        "",
        "| group | chooses | default | option | the option's file says |",
        "|---|---|---|---|---|",
    ]
    for group in CONFIG_GROUPS:
        default = group_default(group)
        shown = group.default or (f"`{default}`" if default else "none")
        options = group_options(group.name)
        if group.name == "sampler":
            options = [(name, text) for name, text in options if name not in RULES]
            options.insert(0, ("<rule>", "every rule of the rules table in docs/rules.md"))
        for index, (option, text) in enumerate(options):
            head = [f"`{group.name}=`", group.doc, shown] if index == 0 else ["", "", ""]
            cells = [*head, f"`{option}`", markdown_cell(text)]
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"<!-- {GROUPS.end} -->"]
    return lines


def _preset_value(value: object) -> str:
    if isinstance(value, str) and SHORTCUT.match(value):
        return SHORTCUT.match(value).group(1)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _preset(name: str, configs_dir: Path) -> dict:
    """configs/sampler/<name>.yaml's values, over those of the files its defaults list names."""
    path = configs_dir / "sampler" / f"{name}.yaml"
    own = yaml.safe_load(path.read_text(encoding="utf-8"))
    values: dict = {}
    for parent in own.get("defaults", []):
        if isinstance(parent, str) and parent != "_self_":
            values |= _preset(parent, configs_dir)
    return values | own


def rule_lines(configs_dir: Path = CONFIGS_DIR) -> list[str]:
    """docs/rules.md's rules table: every rule of the catalogue, its parameters with the values
    its configs/sampler/<name>.yaml gives them, and what it does."""
    lines = [
        f"<!-- {RULE_TABLE.begin} -->",
        "",
        "| `sampler=` | what it does | parameters (configs/sampler/<name>.yaml's values) |",
        "|---|---|---|",
    ]
    for name, rule in RULES.items():
        preset = _preset(name, configs_dir)
        params = [
            f"`{p.name}` ({_preset_value(preset[p.name])})" if p.name in preset else f"`{p.name}`"
            for p in rule.params
        ]
        alias = f"; an alias of `{rule.alias_of}`" if rule.alias_of else ""
        lines.append(
            f"| `{name}` | {markdown_cell(rule.summary)}{alias} | {', '.join(params) or '-'} |"
        )
    lines.append(f"| `{VERIFIER_ONLY}` | no speculation: the verifier decodes alone | - |")
    lines += ["", f"<!-- {RULE_TABLE.end} -->"]
    return lines


SETTINGS = Block("run settings", "cactus_bench/run_settings/table.py", markdown_lines)
GROUPS = Block(
    "config groups", "configs/<group>/*.yaml and cactus_bench/run_settings/groups.py", group_lines
)
RULE_TABLE = Block(
    "acceptance rules", "cactus_bench/samplers/catalogue.py and configs/sampler/", rule_lines
)
CONFIG_COMMENT = Block(SETTINGS.name, SETTINGS.source, yaml_lines)


def rewritten(text: str, block: Block, path: Path) -> str:
    """`text` with the part from the line holding the block's begin marker to the line holding
    its end marker replaced by the block."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if block.begin in line]
    ends = [i for i, line in enumerate(lines) if block.end in line]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(
            f"{path} needs one line with {block.begin!r} and one after it with {block.end!r}"
        )
    return "\n".join([*lines[: starts[0]], *block.lines(), *lines[ends[0] + 1 :]]) + "\n"


def targets() -> dict[Path, list[Block]]:
    return {
        CONFIG_YAML: [CONFIG_COMMENT],
        CONFIGURATION_MD: [SETTINGS, GROUPS],
        RULES_MD: [RULE_TABLE],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, blocks in targets().items():
        current = path.read_text(encoding="utf-8")
        text = current
        for block in blocks:
            text = rewritten(text, block, path)
        if text == current:
            continue
        if args.check:
            stale.append(str(path.relative_to(REPO)))
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(REPO)}")
    if stale:
        print(
            f"{', '.join(stale)} out of date; run `make docs` "
            "(python -m cactus_bench.run.settings_doc)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
