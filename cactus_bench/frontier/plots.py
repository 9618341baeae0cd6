"""Figures from a frontier CSV alone (PNG + PDF, PDFs without a creation date: byte-stable).

    frontier      acceptance against D_f(law || q), one axis per f, one curve per rule; a rule
                  whose law puts mass where q = 0 says at what share of positions it does
    gamma         the emitted law's divergence against delta (what the paper's Gamma(delta)
                  bounds, Theorem 3): mean, 99th percentile and max over positions, per f
    gain          the acceptance gain over SpS against delta, per budgeted rule
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
COLORS = {
    "sps": "C0",
    "tas": "C1",
    "cactus": "C3",
    "cactus_exact": "C4",
    "interp": "C2",
    "topk": "C5",
    "greedy": "C6",
    "mentored": "C7",
    "lenience": "C8",
    "chow": "#17becf",
    "diff": "#aec7e8",
    "opt": "#1f77b4",
    "tokenv1": "#ffbb78",
    "tokenv2": "#98df8a",
    "tokenv3": "#2ca02c",
    "fsd": "#c5b0d5",
    "fsd_reducible": "#8c564b",
    "bild": "#e377c2",
}
MARKERS = {
    "sps": "o",
    "tas": "s",
    "cactus": "^",
    "cactus_exact": "v",
    "interp": "D",
    "topk": "P",
    "greedy": "X",
    "mentored": "*",
    "lenience": "h",
}

DIVERGENCE_STYLES = {
    "kl": "-",
    "reverse_kl": "--",
    "chi2": "-.",
    "hellinger": ":",
    "tv": (0, (5, 1)),
}
HEADLINE = (
    ("sps", ""),
    ("cactus", "delta=1"),
    ("cactus_exact:kl", "delta=1"),
    ("tas", "eps=0.09"),
    ("topk", "k=5"),
)


def _style(rule: str) -> dict:
    family, _, divergence = rule.partition(":")
    style = {"color": COLORS.get(family, "C9"), "marker": MARKERS.get(family, "o")}
    if divergence:
        style["linestyle"] = DIVERGENCE_STYLES.get(divergence, "-")
        style["alpha"] = 1.0 if divergence == "kl" else 0.6
    return style


def _label(rule: str) -> str:
    family, _, divergence = rule.partition(":")
    names = {
        "sps": "SpS",
        "cactus": "Cactus (Taylor, KL)",
        "tas": "TAS (ε)",
        "topk": "top-k (k)",
        "interp": "interpolation (α)",
        "greedy": "greedy",
        "mentored": "mentored (δ on KL(q‖π))",
        "lenience": "lenience (l)",
        "fsd": "FSD (T)",
        "fsd_reducible": "FSD reducible (T)",
        "bild": "BiLD (τ)",
    }
    return f"Cactus-exact ({divergence})" if divergence else names.get(family, family)


def _param(parameter: str) -> float:
    """`delta=0.5` or `alpha=0.3,processed` -> the grid value."""
    return float(parameter.split(",")[0].split("=")[1]) if "=" in parameter else math.nan


def _stat(frame: pd.DataFrame, statistic: str) -> pd.DataFrame:
    rows = frame[frame.statistic == statistic].copy()
    rows["x"] = rows.parameter.map(_param)
    return rows


def _title(figure: Figure, frame: pd.DataFrame, what: str) -> None:
    positions = frame[(frame.rule == "verifier") & (frame.statistic == "positions")]
    count = f", {int(positions.value.iloc[0]):,} positions" if not positions.empty else ""
    pair, prompts = frame.pair.iloc[0], frame.prompt_set.iloc[0]
    figure.suptitle(f"{what}\n{pair}, prompts {prompts}{count}", fontsize=10)


FRONTIER_AXES = (
    ("kl", "KL(law ‖ q)", True),
    ("reverse_kl", "KL(q ‖ law)", True),
    ("chi2", "χ²(law ‖ q)", True),
    ("hellinger", "Hellinger² (no ½)", True),
    ("tv", "TV(law, q)", False),
)


def frontier_figure(frame: pd.DataFrame) -> Figure:
    """Acceptance against the mean D_f(law || q), one axis per f; each rule's points joined in
    the order of its parameter, so a curve is that rule's trade-off. A rule whose law puts mass
    where q = 0 (or no mass where q > 0, for KL(q || law)) has an infinite mean there: the
    legend gives the largest share of positions where its law puts mass on q = 0."""
    figure = Figure(figsize=(20, 4.8), layout="constrained")
    axes = figure.subplots(1, len(FRONTIER_AXES))
    acceptance = _stat(frame, "acceptance")[["rule", "parameter", "value"]]
    sps = acceptance[acceptance.rule == "sps"].value.iloc[0]
    zero = _stat(frame, "q_zero_share").groupby("rule").value.max()
    for ax, (divergence, name, log) in zip(axes, FRONTIER_AXES, strict=True):
        spread = _stat(frame, divergence).merge(
            acceptance, on=["rule", "parameter"], suffixes=("", "_acc")
        )
        drawn = False
        for rule, rows in spread.groupby("rule", sort=False):
            if rule == "sps":
                continue
            rows = rows.sort_values("x")
            shown = rows[rows.value.apply(math.isfinite) & (rows.value > 0)]
            label = _label(rule)
            if zero.get(rule, 0) > 0:
                label += f" (q = 0 mass at ≤{100 * zero[rule]:.0f}% of positions)"
            ax.plot(shown.value, shown.value_acc, label=label, markersize=3, **_style(rule))
            drawn = drawn or not shown.empty
        ax.axhline(
            sps,
            color=COLORS["sps"],
            linestyle="--",
            linewidth=1,
            label=f"SpS (lossless), {sps:.3f}",
        )
        if log and drawn:  # a log axis needs a positive value
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"mean {name}" + (" (log scale)" if log else ""))
        ax.set_ylabel("mean acceptance β (exact)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right center", fontsize=7)
    _title(
        figure,
        frame,
        "Acceptance against the emitted law's divergence, per f (up-left is "
        "better; a rule missing from an axis is infinite there)",
    )
    return figure


def gamma_figure(frame: pd.DataFrame) -> Figure:
    """Theorem 3's quantity: D_f(law || q) against delta for the budgeted rules, per f. Solid:
    the mean over positions; dashed: the 99th percentile; dotted: the max; grey: y = delta."""
    figure = Figure(figsize=(20, 4.6), layout="constrained")
    axes = figure.subplots(1, len(FRONTIER_AXES))
    for ax, (divergence, name, _) in zip(axes, FRONTIER_AXES, strict=True):
        rules = [f"cactus_exact:{divergence}"] + {"kl": ["cactus"], "reverse_kl": ["mentored"]}.get(
            divergence, []
        )
        for rule in rules:
            style = _style(rule)
            for statistic, dash in (
                (divergence, "-"),
                (f"{divergence}_q99", "--"),
                (f"{divergence}_max", ":"),
            ):
                line = _stat(frame[frame.rule == rule], statistic).sort_values("x")
                line = line[line.value.apply(math.isfinite) & (line.value > 0)]
                if line.empty:
                    continue
                ax.plot(
                    line.x,
                    line.value,
                    color=style["color"],
                    marker=style["marker"],
                    linestyle=dash,
                    markersize=3,
                    label=f"{_label(rule)}: {statistic.removeprefix(divergence) or 'mean'}",
                )
        deltas = sorted(_stat(frame, "acceptance").query("rule == 'cactus'").x)
        if deltas:
            ax.plot(deltas, deltas, color="0.6", linewidth=1, label="δ")
        if ax.lines:  # log axes need positive values (an empty grid draws an empty axis)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("δ (budget)")
        ax.set_ylabel(f"{name} of the emitted law")
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    _title(figure, frame, "Γ(δ): the emitted law's divergence against the budget (Theorem 3)")
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
    rules = [r for r in frame.rule.unique() if r.startswith("cactus") or r == "mentored"]
    _versus_delta(ax, frame, "gain", rules)
    ax.set_ylabel("gain: mean acceptance gained over SpS")
    ax.legend(fontsize=7)
    _title(figure, frame, "Acceptance gained over SpS against the budget")
    return figure


def overshoot_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(11, 4.4), layout="constrained")
    left, right = figure.subplots(1, 2)
    for statistic, label in (
        ("overshoot_position_share", "positions with a draft over δ"),
        ("overshoot_draft_share", "drafts over δ (n ~ p)"),
    ):
        rows = frame[(frame.rule == "cactus")]
        line = _stat(rows, statistic).sort_values("x")
        style = _style("cactus")
        style["linestyle"] = "-" if statistic == "overshoot_draft_share" else ":"
        left.plot(line.x, line.value, label=f"Taylor: {label}", markersize=3, **style)
        left.fill_between(line.x, line.ci_low, line.ci_high, color=style["color"], alpha=0.15)
    exact = _stat(frame[frame.rule == "cactus_exact:kl"], "overshoot_draft_share")
    if not exact.empty:
        left.plot(
            exact.sort_values("x").x,
            exact.sort_values("x").value,
            label="Cactus-exact (KL): drafts over δ",
            markersize=3,
            **_style("cactus_exact:kl"),
        )
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
        rows = frame[
            (frame.rule == rule)
            & (frame.parameter == parameter)
            & frame.statistic.str.startswith(prefix)
        ]
        if rows.empty:
            continue
        xs = [x_of(s) for s in rows.statistic]
        err = [rows.value - rows.ci_low, rows.ci_high - rows.value]
        ax.errorbar(
            xs,
            rows.value,
            yerr=err,
            capsize=2,
            markersize=4,
            label=f"{_label(rule)} {parameter}".strip(),
            **_style(rule),
        )


def entropy_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(7.5, 4.6), layout="constrained")
    ax = figure.subplots()
    labels = list(
        dict.fromkeys(s.removeprefix("gain@H=") for s in frame.statistic if s.startswith("gain@H="))
    )
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


FIGURES = {
    "frontier": frontier_figure,
    "gamma": gamma_figure,
    "gain": gain_figure,
    "overshoot": overshoot_figure,
    "entropy": entropy_figure,
    "al": al_figure,
}


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
