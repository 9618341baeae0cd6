"""The claims figure: per rule, its IFEval score minus SpS's on the same prompts against its AL,
with both 95 % intervals (AL: the row's; score: paired), prompt level and instruction level side
by side, and the MDE band around 0 (claims.py). The verifier alone drafts nothing: it sits at
AL 0. Written by claims_page.write_claims_figure (`make plots`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from cactus_bench.report.claims import claim_arms
from cactus_bench.report.claims_requests import load_requests
from cactus_bench.report.claims_settings import claim_settings
from cactus_bench.report.error_bars import clipped_errors
from cactus_bench.report.figure_parts import MARKERS, sampler_color, save_figure
from cactus_bench.report.load import device_names

PANELS = (("prompt", "(a) prompt-level strict accuracy"), ("inst", "(b) instruction-level"))
FIGURE_STEM = "paper_claims_score_vs_al"
# the Cactus budgets share the rule's hue, lighter for a smaller δ, and a marker of their own
ARM_MARKERS = {"Cactus (δ = 0.5)": "<", "Cactus (δ = 1)": "^", "Cactus (δ = 2)": ">"}
ARM_SHADES = {"Cactus (δ = 0.5)": 0.5, "Cactus (δ = 2)": -0.25}  # + towards white, - black


def arm_color(arm: str, rule: str) -> tuple[float, float, float]:
    base = np.array(to_rgb(sampler_color(rule)))
    shade = ARM_SHADES.get(arm, 0.0)
    toward = np.ones(3) if shade > 0 else np.zeros(3)
    return tuple(float(x) for x in base + abs(shade) * (toward - base))


def claims_figure(arms: pd.DataFrame, mde: dict, m: int, where: str, margins: dict) -> Figure:
    """`where`: the pair and the machine that decoded, a line under the title; margins: the
    non-inferiority margin per metric (claims_settings.py), drawn as a dashed line."""
    figure = Figure(figsize=(14.5, 4.4), layout="constrained")
    axes = figure.subplots(1, 3, sharex=True)
    length_panel(axes[2], arms, m)
    for ax, (metric, title) in zip(axes, PANELS, strict=False):
        column = f"{metric}_diff_sps"
        if column not in arms or arms[column].isna().all():
            ax.text(
                0.5,
                0.5,
                "no per-prompt table",
                ha="center",
                va="center",
                fontsize=9,
                transform=ax.transAxes,
            )
        else:
            for line in arms.itertuples():
                line = line._asdict()
                if pd.isna(line.get(column)):
                    continue
                al = 0.0 if pd.isna(line["al"]) else line["al"]
                xerr, _ = clipped_errors([al], [line["al_ci_low"]], [line["al_ci_high"]])
                yerr, _ = clipped_errors(
                    [line[column]], [line[f"{column}_ci_low"]], [line[f"{column}_ci_high"]]
                )
                marker = ARM_MARKERS.get(line["arm"], MARKERS.get(line["rule"], "o"))
                ax.errorbar(
                    [al],
                    [100 * line[column]],
                    xerr=np.nan_to_num(xerr),
                    yerr=100 * yerr,
                    fmt=marker,
                    color=arm_color(line["arm"], line["rule"]),
                    markersize=6,
                    elinewidth=1.2,
                    capsize=2.5,
                    label=line["arm"],
                )
        margin = margins[metric]
        label = "non-inferiority margin, fixed before the run"
        ax.axhline(-100 * margin, color="0.45", linestyle="--", linewidth=1, label=label)
        power = mde.get(metric, math.nan)
        here = f"margin {100 * margin:.1f} points; MDE at 80 % power {100 * power:.1f}"
        ax.text(0.01, 0.98, here, transform=ax.transAxes, va="top", fontsize=7, color="0.35")
        ax.axhline(0.0, color="0.25", linewidth=1, zorder=1)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel(f"AL: accepted drafts per step (m = {m}, 95 % interval)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("score − SpS's, same prompts (points, paired 95 %)")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    title = f"IFEval, {mde['n']} prompts: score against SpS and answer length per rule\n{where}"
    figure.suptitle(title, fontsize=10)
    return figure


def length_panel(ax, arms: pd.DataFrame, m: int) -> None:
    """(c) λ, the rule's generated tokens over the verifier's on the same prompts (95 %)."""
    for line in arms.itertuples():
        line = line._asdict()
        ratio = line.get("length_ratio")
        if ratio is None or pd.isna(ratio):
            continue
        al = 0.0 if pd.isna(line["al"]) else line["al"]
        yerr, _ = clipped_errors(
            [ratio], [line["length_ratio_ci_low"]], [line["length_ratio_ci_high"]]
        )
        marker = ARM_MARKERS.get(line["arm"], MARKERS.get(line["rule"], "o"))
        color = arm_color(line["arm"], line["rule"])
        ax.errorbar([al], [ratio], yerr=yerr, fmt=marker, color=color, markersize=6, capsize=2.5)
    ax.axhline(1.0, color="0.25", linewidth=1, zorder=1)
    ax.set_title("(c) answer length λ against the verifier alone", fontsize=10, loc="left")
    ax.set_xlabel(f"AL: accepted drafts per step (m = {m}, 95 % interval)")
    ax.set_ylabel("λ = generated tokens / the verifier's (95 %)")
    ax.grid(alpha=0.3)


def write_claims_figure(csv: Path, rows: pd.DataFrame, out: Path, settings=None) -> list[Path]:
    """OUT/paper_claims_score_vs_al.{png,pdf} from the sweep's rows and per-prompt table
    (settings: claims_settings.ClaimSettings, the experiment's by default)."""
    settings = settings or claim_settings()
    arms, mde, _ = claim_arms(rows, load_requests(csv), settings.resamples)
    speculative = rows[rows.sampler != "verifier"]
    m = int(speculative.m.iloc[0]) if len(speculative) else 0
    pairs = sorted(set(rows.model_pair.astype(str))) if "model_pair" in rows else []
    where = f"pair {', '.join(pairs)}; decoded on {device_names(rows)}"
    figure = claims_figure(arms, mde, m, where, settings.margins)
    figure.set_label(where)
    out.mkdir(parents=True, exist_ok=True)
    return save_figure(figure, out / FIGURE_STEM, ("png", "pdf"))
