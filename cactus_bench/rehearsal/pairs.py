"""The pairs the rehearsal runs: every configs/model/*.yaml whose two ids are hub ids.

The YAMLs, not the registry, are read, because they are what `run.py model=<name>` loads: a
revision pinned there is the revision the cache must serve.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from cactus_bench.models.registry import EMBEDDED_PREFIX, PairSpec

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "model"


def is_hub_id(model_id: str) -> bool:
    """`org/name` that is not an embedded id, a GGUF file or an existing local path."""
    return (
        not model_id.startswith(EMBEDDED_PREFIX)
        and not model_id.endswith(".gguf")
        and model_id.count("/") == 1
        and not Path(model_id).expanduser().exists()
    )


def hub_pairs(config_dir: Path = CONFIG_DIR) -> list[PairSpec]:
    """The model YAMLs whose drafter and verifier are both hub ids, sorted by name."""
    pairs = []
    for path in sorted(Path(config_dir).glob("*.yaml")):
        spec = PairSpec(**yaml.safe_load(path.read_text()))
        if is_hub_id(spec.drafter) and is_hub_id(spec.verifier):
            pairs.append(spec)
    return pairs


def pinned_revisions(pairs: list[PairSpec]) -> dict[str, list[str | None]]:
    """repo id -> the revisions the pairs pin for it (None: the default branch)."""
    revisions: dict[str, list[str | None]] = {}
    for spec in pairs:
        for repo, revision in (
            (spec.drafter, spec.drafter_revision),
            (spec.verifier, spec.verifier_revision),
        ):
            wanted = revisions.setdefault(repo, [])
            if revision not in wanted:
                wanted.append(revision)
    return revisions
