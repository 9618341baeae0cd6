"""The claims' verdict settings, fixed before a run in the experiment's config beside its Hydra
file (configs/experiment/<experiment>.claims.toml): the non-inferiority margins per metric and
the bootstrap's resamples, stability seeds and stable share. claims_verdicts.py reads them; the
page prints them."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "experiment"


@dataclass(frozen=True)
class ClaimSettings:
    margins: dict  # {"prompt": m, "inst": m}: fractions of accuracy
    resamples: int  # paired bootstrap draws per interval
    stability_seeds: int  # seeds 0 .. stability_seeds - 1
    stable_share: float  # below it an outcome reads "borderline"


def claim_settings(experiment: str = "paper_claims") -> ClaimSettings:
    path = CONFIG_DIR / f"{experiment}.claims.toml"
    if not path.is_file():
        raise ValueError(f"{path} is missing: the claims' margins are fixed there before a run")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    margins = {name: float(data["margins"][name]) for name in ("prompt", "inst")}
    if any(not 0 < value < 1 for value in margins.values()):
        raise ValueError(f"{path}: margins are fractions of accuracy in (0, 1), got {margins}")
    boot = data["bootstrap"]
    return ClaimSettings(
        margins,
        int(boot["resamples"]),
        int(boot["stability_seeds"]),
        float(boot["stable_share"]),
    )
