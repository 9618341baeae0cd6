"""The config groups, the settings outside the table: each folder of configs/ that the command
line picks one file from (`model=qwen3_8b`, `hydra/launcher=slurm`).

What each group chooses is declared here, once; its options are the folder's YAML files, each
described by the first sentence of its own leading comment, and its default is the one
configs/config.yaml's defaults list names. `make docs` writes the table of them into
docs/configuration.md (run/settings_doc.py); tests/test_settings_doc.py checks that every folder
is declared and every option described.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"
# A sentence ends at a full stop and a space, not after "et al", "e.g" or "i.e".
SENTENCE_END = re.compile(r"(?<!\bal)(?<!e\.g)(?<!i\.e)\.(\s|$)")


@dataclass(frozen=True)
class ConfigGroup:
    name: str  # the folder under configs/, also the command-line key
    doc: str  # one line: what the group chooses
    default: str = ""  # the default when configs/config.yaml names none ("" = read it there)


CONFIG_GROUPS: tuple[ConfigGroup, ...] = (
    ConfigGroup("model", "the drafter-verifier pair: hub ids, revisions, dtype, chat template"),
    ConfigGroup("task", "the benchmark, its prompts and its score"),
    ConfigGroup(
        "sampler",
        "the acceptance rule with its parameters, a preset arm of one, or verifier (no drafts)",
    ),
    ConfigGroup("backend", "what decodes both arms: this project's HF engine or vLLM"),
    ConfigGroup("logger", "where each run is recorded besides the results CSV"),
    ConfigGroup("experiment", "a preset sweep: its arms, its CSV and its settings"),
    ConfigGroup(
        "hydra/launcher",
        "how a sweep's jobs run (with -m): one after another here, or as a Slurm array",
        default="Hydra's basic launcher (one job after another in this process)",
    ),
    ConfigGroup(
        "cell",
        "a pair's settings when no task is named: picked as <model>_<task>, not on the "
        "command line",
    ),
)


def description(yaml_text: str) -> str:
    """The first sentence of a YAML file's leading comment (Hydra's `@package` line skipped; an
    indented comment line, a command example, ends the paragraph)."""
    lines = []
    for line in yaml_text.splitlines():
        text = line.removeprefix("#")
        if text == line or text.startswith("  ") or not text.strip():
            break
        if not text.strip().startswith("@package"):
            lines.append(text.strip())
    paragraph = " ".join(lines)
    end = SENTENCE_END.search(paragraph)
    return (paragraph[: end.start() + 1] if end else paragraph).removesuffix(":")


def group_options(group: str, configs_dir: Path = CONFIGS_DIR) -> list[tuple[str, str]]:
    """[(option, description)] of every YAML file in the group's folder, by name."""
    folder = configs_dir / group
    return [
        (path.stem, description(path.read_text(encoding="utf-8")))
        for path in sorted(folder.glob("*.yaml"))
    ]


def group_default(group: ConfigGroup, configs_dir: Path = CONFIGS_DIR) -> str | None:
    """The option configs/config.yaml's defaults list picks for `group` (None: no option), or
    the group's declared default."""
    if group.default:
        return group.default
    config = yaml.safe_load((configs_dir / "config.yaml").read_text(encoding="utf-8"))
    for entry in config["defaults"]:
        if isinstance(entry, dict):
            for key, value in entry.items():
                if key.removeprefix("optional ") == group.name:
                    return value
    return None


def group_folders(configs_dir: Path = CONFIGS_DIR) -> set[str]:
    """Every folder under configs/ that holds YAML options (configs/hydra holds only folders)."""
    return {
        path.parent.relative_to(configs_dir).as_posix() for path in configs_dir.glob("*/**/*.yaml")
    }
