"""The run settings as people read them, written from the settings table so that they never
drift from it: the comment block in configs/config.yaml and the table in docs/configuration.md.

    python -m cactus_bench.run.settings_doc          # rewrite both (make docs)
    python -m cactus_bench.run.settings_doc --check  # exit 1 when either is out of date

Each file keeps its own text; only the part between its two marker lines is generated.
tests/test_settings_doc.py runs the check.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from cactus_bench.results.schema_doc import markdown_cell
from cactus_bench.run_settings import OPTIONS, Setting

REPO = Path(__file__).resolve().parents[2]
CONFIG_YAML = REPO / "configs" / "config.yaml"
CONFIGURATION_MD = REPO / "docs" / "configuration.md"
BEGIN = "run settings: generated from cactus_bench/run_settings.py by `make docs`"
END = "end of the generated run settings"


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
    lines = [f"# ---- {BEGIN} ----"]
    for setting in OPTIONS:
        check = setting.option.check
        allowed = f"; must be {check.rule}" if check else ""
        text = f"{setting.key} ({_type_text(setting)}, default {_default_text(setting)}{allowed}): "
        lines += textwrap.wrap(
            text + setting.doc, width=100, initial_indent="# ", subsequent_indent="#     "
        )
    lines.append(f"# ---- {END} ----")
    return lines


def markdown_lines() -> list[str]:
    """docs/configuration.md's settings table."""
    lines = [
        f"<!-- {BEGIN} -->",
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
    lines += ["", f"<!-- {END} -->"]
    return lines


def rewritten(text: str, block: list[str], path: Path) -> str:
    """`text` with the part from the line holding BEGIN to the line holding END replaced."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if BEGIN in line]
    ends = [i for i, line in enumerate(lines) if END in line]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ValueError(f"{path} needs one line with {BEGIN!r} and one after it with {END!r}")
    return "\n".join([*lines[: starts[0]], *block, *lines[ends[0] + 1 :]]) + "\n"


def targets() -> dict[Path, list[str]]:
    return {CONFIG_YAML: yaml_lines(), CONFIGURATION_MD: markdown_lines()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, block in targets().items():
        current = path.read_text(encoding="utf-8")
        text = rewritten(current, block, path)
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
