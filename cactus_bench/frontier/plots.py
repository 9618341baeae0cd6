"""Figures from a frontier CSV alone (PNG + PDF, PDFs without a creation date: byte-stable).

    frontier      acceptance against KL(law || q) and TV(law, q): one curve per rule
    gain          Gamma(delta) = acceptance gain over SpS against delta, per cactus rule
    overshoot     the Taylor rule's budget violations against delta (Corollary 6)
    entropy       gain by verifier-entropy bin for a few headline arms
    al            predicted AL(m) against m for the same arms
Bands and error bars are the CSV's 95 % bootstrap intervals.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from cactus_bench.report.figure_parts import save_figure

# One color and marker per rule family, the same as the task figures' (report/plots.py), kept
# here so these figures do not depend on that module's internals.
COLORS = {"sps": "C0", "tas": "C1", "cactus": "C3", "cactus_exact": "C4", "interp": "C2",
          "topk": "C5", "greedy": "C6"}  # fmt: skip
MARKERS = {"sps": "o", "tas": "s", "cactus": "^", "cactus_exact": "v", "interp": "D",
           "topk": "P", "greedy": "X"}  # fmt: skip

DIVERGENCE_STYLES = {
    "kl": "-",
    "reverse_kl": "--",
    "chi2": "-.",
    "hellinger": ":",
    "tv": (0, (5, 1)),
}
HEADLINE = (("sps", ""), ("cactus", "delta=1"), ("cactus_exact:kl", "delta=1"),
            ("tas", "eps=0.09"), ("topk", "k=5"))  # fmt: skip


def _style(rule: str) -> dict:
    family, _, divergence = rule.partition(":")
    style = {"color": COLORS.get(family, "C9"), "marker": MARKERS.get(family, "o")}
    if divergence:
        style["linestyle"] = DIVERGENCE_STYLES.get(divergence, "-")
        style["alpha"] = 1.0 if divergence == "kl" else 0.6
    return style


def _label(rule: str) -> str:
    family, _, divergence = rule.partition(":")
    names = {"sps": "SpS", "cactus": "Cactus (Taylor, KL)", "tas": "TAS (ε)", "topk": "top-k (k)",
             "interp": "interpolation (α)", "greedy": "greedy"}  # fmt: skip
    return f"Cactus-exact ({divergence})" if divergence else names.get(family, family)


def _param(parameter: str) -> float:
    return float(parameter.split("=")[1]) if "=" in parameter else math.nan


def _stat(frame: pd.DataFrame, statistic: str) -> pd.DataFrame:
    rows = frame[frame.statistic == statistic].copy()
    rows["x"] = rows.parameter.map(_param)
    return rows


def _title(figure: Figure, frame: pd.DataFrame, what: str) -> None:
    positions = frame[(frame.rule == "verifier") & (frame.statistic == "positions")]
    count = f", {int(positions.value.iloc[0]):,} positions" if not positions.empty else ""
    pair, prompts = frame.pair.iloc[0], frame.prompt_set.iloc[0]
    figure.suptitle(f"{what}\n{pair}, prompts {prompts}{count}", fontsize=10)


def frontier_figure(frame: pd.DataFrame) -> Figure:
    """Acceptance against KL and TV of the emitted law; each rule's points joined in the order
    of its parameter (delta, epsilon, k, alpha), so a curve is that rule's trade-off."""
    figure = Figure(figsize=(12, 4.8), layout="constrained")
    axes = figure.subplots(1, 2)
    acceptance = _stat(frame, "acceptance")[["rule", "parameter", "value"]]
    sps = acceptance[acceptance.rule == "sps"].value.iloc[0]
    for ax, divergence, xlabel in ((axes[0], "kl", "mean KL(law ‖ q), nats (log scale)"),
                                   (axes[1], "tv", "mean TV(law, q)")):  # fmt: skip
        spread = _stat(frame, divergence).merge(
            acceptance, on=["rule", "parameter"], suffixes=("", "_acc")
        )
        for rule, rows in spread.groupby("rule", sort=False):
            if rule == "sps":
                continue
            rows = rows.sort_values("x")
            shown = rows[rows.value.apply(math.isfinite) & (rows.value > 0)]
            label = _label(rule)
            if len(shown) < len(rows) and divergence == "kl":
                label += f" ({len(rows) - len(shown)} of {len(rows)} at KL = ∞)"
            ax.plot(shown.value, shown.value_acc, label=label, markersize=3, **_style(rule))
        ax.axhline(sps, color=COLORS["sps"], linestyle="--", linewidth=1,
                   label=f"SpS (lossless), {sps:.3f}")  # fmt: skip
        if divergence == "kl":
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(xlabel)
        ax.set_ylabel("mean acceptance β (exact)")
        ax.grid(alpha=0.3)
    # TV: zoom on the rules whose law stays inside q's support (finite KL); the rest continue
    # along the same line beyond the frame.
    finite = _stat(frame, "kl").query("rule != 'sps'")
    finite = finite[finite.value.apply(math.isfinite)][["rule", "parameter"]]
    tv = _stat(frame, "tv").merge(finite, on=["rule", "parameter"])
    if not tv.empty and tv.value.max() < _stat(frame, "tv").value.max():
        axes[1].set_xlim(0, 1.1 * tv.value.max())
        axes[1].set_ylim(top=1.02 * acceptance.merge(tv[["rule", "parameter"]]).value.max())
        note = "zoomed to the rules with finite KL;\nthe others go on up the line"
        axes[1].text(0.98, 0.02, note, transform=axes[1].transAxes, ha="right", va="bottom",
                     fontsize=7, color="0.35")  # fmt: skip
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right center", fontsize=7)
    _title(
        figure, frame, "Acceptance against the divergence of the emitted law (up-left is better)"
    )
    return figure


def _versus_delta(ax: Axes, frame: pd.DataFrame, statistic: str, rules) -> None:
    rows = _stat(frame, statistic)
    for rule in rules:
        line = rows[rows.rule == rule].sort_values("x")
        if line.empty:
            continue
        style = _style(rule)
        ax.plot(line.x, line.value, label=_label(rule), markersize=3, **style)
        ax.fill_between(line.x, line.ci_low, line.ci_high, color=style["color"], alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel("δ (divergence budget)")
    ax.grid(alpha=0.3)


def gain_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = figure.subplots()
    rules = [r for r in frame.rule.unique() if r.startswith("cactus")]
    _versus_delta(ax, frame, "gain", rules)
    ax.set_ylabel("Γ(δ): mean acceptance gain over SpS")
    ax.legend(fontsize=7)
    _title(figure, frame, "Acceptance gained over SpS against the budget")
    return figure


def overshoot_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(11, 4.4), layout="constrained")
    left, right = figure.subplots(1, 2)
    for statistic, label in (("overshoot_position_share", "positions with a draft over δ"),
                             ("overshoot_draft_share", "drafts over δ (n ~ p)")):  # fmt: skip
        rows = frame[(frame.rule == "cactus")]
        line = _stat(rows, statistic).sort_values("x")
        style = _style("cactus")
        style["linestyle"] = "-" if statistic == "overshoot_draft_share" else ":"
        left.plot(line.x, line.value, label=f"Taylor: {label}", markersize=3, **style)
        left.fill_between(line.x, line.ci_low, line.ci_high, color=style["color"], alpha=0.15)
    exact = _stat(frame[frame.rule == "cactus_exact:kl"], "overshoot_draft_share")
    if not exact.empty:
        left.plot(exact.sort_values("x").x, exact.sort_values("x").value,
                  label="Cactus-exact (KL): drafts over δ", markersize=3,
                  **_style("cactus_exact:kl"))  # fmt: skip
    left.set_xscale("log")
    left.set_xlabel("δ (KL budget, nats)")
    left.set_ylabel("share")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    _versus_delta(right, frame, "overshoot_excess_given_overshoot", ["cactus"])
    right.set_ylabel("KL(h_n ‖ q) − δ over the drafts that exceed δ (nats)")
    _title(figure, frame, "Taylor rule: how often and how far its target breaks the KL budget")
    return figure


def _headline_lines(ax: Axes, frame: pd.DataFrame, prefix: str, x_of) -> None:
    for rule, parameter in HEADLINE:
        rows = frame[(frame.rule == rule) & (frame.parameter == parameter)
                     & frame.statistic.str.startswith(prefix)]  # fmt: skip
        if rows.empty:
            continue
        xs = [x_of(s) for s in rows.statistic]
        err = [rows.value - rows.ci_low, rows.ci_high - rows.value]
        ax.errorbar(xs, rows.value, yerr=err, capsize=2, markersize=4,
                    label=f"{_label(rule)} {parameter}".strip(), **_style(rule))  # fmt: skip


def entropy_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = figure.subplots()
    labels = list(dict.fromkeys(s.removeprefix("gain@H=") for s in frame.statistic
                                if s.startswith("gain@H=")))  # fmt: skip
    _headline_lines(ax, frame, "gain@H=", lambda s: labels.index(s.removeprefix("gain@H=")))
    counts = frame[frame.statistic.str.startswith("gain@H=")].groupby("statistic").n_positions
    ticks = [f"{label}\nn={counts.first()['gain@H=' + label]:,}" for label in labels]
    ax.set_xticks(range(len(labels)), ticks, fontsize=8)
    ax.set_xlabel("verifier entropy H(q_t) bin (nats)")
    ax.set_ylabel("mean acceptance gain over SpS")
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _title(figure, frame, "Where the gain comes from: acceptance gained by verifier entropy")
    return figure


def al_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = figure.subplots()
    _headline_lines(ax, frame, "al@m=", lambda s: int(s.removeprefix("al@m=")))
    ax.set_xlabel("draft length m")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("predicted AL (accepted drafts per step)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    _title(figure, frame, "Predicted AL(m) from exact per-position acceptance (verifier contexts)")
    return figure


FIGURES = {"frontier": frontier_figure, "gain": gain_figure, "overshoot": overshoot_figure,
           "entropy": entropy_figure, "al": al_figure}  # fmt: skip


def make_figures(csv_path: str | Path, out_dir: str | Path, formats=("png", "pdf")) -> list[Path]:
    """Draws every figure of the CSV into out_dir as <kind>_<pair>.<fmt>; returns the paths."""
    frame = pd.read_csv(csv_path, keep_default_na=False, na_values=[""])
    frame["parameter"] = frame.parameter.fillna("").astype(str)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind, draw in FIGURES.items():
        paths += save_figure(draw(frame), out_dir / f"{kind}_{frame.pair.iloc[0]}", formats)
    return paths
