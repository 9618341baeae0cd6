"""Figures from a frontier CSV alone (PNG + PDF, PDFs without a creation date: byte-stable).

    frontier      acceptance against D_f(law || q), one axis per f, one curve per rule; a rule
                  whose law puts mass where q = 0 says at what share of positions it does
    gamma         the emitted law's divergence against delta (what the paper's Gamma(delta)
                  bounds, Theorem 3): mean, 99th percentile and max over positions, per f
    gain          the acceptance gain over SpS against delta, per budgeted rule
    overshoot     the Taylor rule's budget violations against delta (Corollary 6)
    entropy       gain by verifier-entropy bin for a few headline arms
    al            predicted AL(m) against m for the same arms
    matched       every rule's acceptance minus Cactus's at matched D_f, per f (plots_matched.py;
                  not drawn for a CSV without matched rows)
    stop          stop-mass ratio, out-of-head mass and entropy against acceptance (plots_stop.py;
                  not drawn for a CSV written before those statistics)
Bands and error bars are the CSV's 95 % bootstrap intervals.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cactus_bench.frontier.plot_style import HEADLINE, add_title, rule_label, rule_style, stat_rows
from cactus_bench.frontier.plots_divergence import frontier_figure, gamma_figure
from cactus_bench.frontier.plots_matched import matched_figure
from cactus_bench.frontier.plots_stop import stop_figure
from cactus_bench.report.error_bars import clipped_errors, mark_excluded
from cactus_bench.report.figure_parts import save_figure


def _versus_delta(ax: Axes, frame: pd.DataFrame, statistic: str, rules) -> None:
    rows = stat_rows(frame, statistic)
    for rule in rules:
        line = rows[rows.rule == rule].sort_values("x")
        if line.empty:
            continue
        style = rule_style(rule)
        ax.plot(line.x, line.value, label=rule_label(rule), markersize=3, **style)
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
    add_title(figure, frame, "Acceptance gained over SpS against the budget")
    return figure


def overshoot_figure(frame: pd.DataFrame) -> Figure:
    figure = Figure(figsize=(11, 4.4), layout="constrained")
    left, right = figure.subplots(1, 2)
    for statistic, label in (
        ("overshoot_position_share", "positions with a draft over δ"),
        ("overshoot_draft_share", "drafts over δ (n ~ p)"),
    ):
        rows = frame[(frame.rule == "cactus")]
        line = stat_rows(rows, statistic).sort_values("x")
        style = rule_style("cactus")
        style["linestyle"] = "-" if statistic == "overshoot_draft_share" else ":"
        left.plot(line.x, line.value, label=f"Taylor: {label}", markersize=3, **style)
        left.fill_between(line.x, line.ci_low, line.ci_high, color=style["color"], alpha=0.15)
    exact = stat_rows(frame[frame.rule == "cactus_exact:kl"], "overshoot_draft_share")
    if not exact.empty:
        left.plot(
            exact.sort_values("x").x,
            exact.sort_values("x").value,
            label="Cactus-exact (KL): drafts over δ",
            markersize=3,
            **rule_style("cactus_exact:kl"),
        )
    left.set_xscale("log")
    left.set_xlabel("δ (KL budget, nats)")
    left.set_ylabel("share")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    _versus_delta(right, frame, "overshoot_excess_given_overshoot", ["cactus"])
    right.set_ylabel("KL(h_n ‖ q) − δ over the drafts that exceed δ (nats)")
    add_title(figure, frame, "Taylor rule: how often and how far its target breaks the KL budget")
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
        err, excluded = clipped_errors(rows.value, rows.ci_low, rows.ci_high)
        style = rule_style(rule)
        ax.errorbar(
            xs,
            rows.value,
            yerr=err,
            capsize=2,
            markersize=4,
            label=f"{rule_label(rule)} {parameter}".strip(),
            **style,
        )
        mark_excluded(ax, xs, rows.value, excluded, style["color"])


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
    add_title(figure, frame, "Where the gain comes from: acceptance gained by verifier entropy")
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
    add_title(
        figure, frame, "Predicted AL(m) from exact per-position acceptance (verifier contexts)"
    )
    return figure


FIGURES = {
    "frontier": frontier_figure,
    "gamma": gamma_figure,
    "gain": gain_figure,
    "overshoot": overshoot_figure,
    "entropy": entropy_figure,
    "al": al_figure,
    "matched": matched_figure,
    "stop": stop_figure,
}


def make_figures(csv_path: str | Path, out_dir: str | Path, formats=("png", "pdf")) -> list[Path]:
    """Draws every figure of the CSV into out_dir as <kind>_<csv stem>.<fmt> (<pair> for the
    held-out contexts, <pair>__drafter_train for the second set); returns the paths."""
    frame = pd.read_csv(csv_path, keep_default_na=False, na_values=[""])
    frame["parameter"] = frame.parameter.fillna("").astype(str)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for kind, draw in FIGURES.items():
        figure = draw(frame)
        if figure is not None:  # nothing to draw from this CSV (an older one)
            paths += save_figure(figure, out_dir / f"{kind}_{Path(csv_path).stem}", formats)
    return paths
