"""What a rule's emitted law does to the stop and to q's head, against its acceptance.

stop          three panels, x = mean acceptance (each rule's arms joined along its grid): the
              stop-mass ratio sum law(S) / sum q(S) over all positions (solid) and at the
              verifier's own stops (dotted); the out-of-head mass per 1,000 tokens with q's
              own as a grey line; the emitted law's entropy minus q's. SpS sits at ratio 1.
A CSV written before these statistics existed has none of their rows: `missing_statistics`
names them and no figure is drawn (the other figures are unchanged).
"""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.figure import Figure

from cactus_bench.frontier.plot_style import add_title, rule_label, rule_style

STOP_STATISTICS = (
    "stop_mass_ratio",
    "stop_mass_ratio@stop",
    "out_of_head_per_1000",
    "emitted_entropy_vs_q",
)


def missing_statistics(frame: pd.DataFrame) -> list[str]:
    """The stop and head statistics this CSV lacks (all of them for one written before them)."""
    present = set(frame.statistic)
    return [name for name in STOP_STATISTICS if name not in present]


def _against_acceptance(frame: pd.DataFrame, statistic: str) -> pd.DataFrame:
    """rule, parameter, value, acceptance: one row per arm with both."""
    acceptance = frame[frame.statistic == "acceptance"][["rule", "parameter", "value"]]
    rows = frame[frame.statistic == statistic][["rule", "parameter", "value"]]
    joined = rows.merge(acceptance, on=["rule", "parameter"], suffixes=("", "_acc"))
    return joined[joined.value.apply(math.isfinite)].sort_values("value_acc", kind="stable")


def _draw(ax, frame: pd.DataFrame, statistic: str, dotted: bool = False) -> None:
    for rule, rows in _against_acceptance(frame, statistic).groupby("rule", sort=False):
        style = rule_style(rule)
        if dotted:
            style = {**style, "linestyle": ":", "markerfacecolor": "none"}
        label = None if dotted else rule_label(rule)
        ax.plot(rows.value_acc, rows.value, markersize=3, label=label, **style)


def stop_figure(frame: pd.DataFrame) -> Figure | None:
    if missing_statistics(frame):
        return None
    figure = Figure(figsize=(16, 4.8), layout="constrained")
    ratio, head, spread = figure.subplots(1, 3)
    _draw(ratio, frame, "stop_mass_ratio")
    _draw(ratio, frame, "stop_mass_ratio@stop", dotted=True)
    ratio.axhline(1.0, color="0.5", linewidth=1)
    ratio.set_ylabel("stop-mass ratio Σ law(S) / Σ q(S)\n(solid: all positions; dotted: at stops)")
    _draw(head, frame, "out_of_head_per_1000")
    verifier = frame[(frame.rule == "verifier") & (frame.statistic == "out_of_head_per_1000")]
    if not verifier.empty:
        own = float(verifier.value.iloc[0])
        head.axhline(own, color="0.5", linewidth=1, label=f"q's own, {own:.1f}")
    head.set_ylabel("emitted mass on q(x) < c·max q, per 1,000 tokens")
    _draw(spread, frame, "emitted_entropy_vs_q")
    spread.axhline(0.0, color="0.5", linewidth=1)
    spread.set_ylabel("H(law) − H(q), nats (mean over positions)")
    for ax in (ratio, head, spread):
        ax.set_xlabel("mean acceptance β (exact)")
        ax.grid(alpha=0.3)
    handles, labels = head.get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside right center", fontsize=7)
    add_title(
        figure,
        frame,
        "The emitted law at the stop and off q's head: stop-mass ratio, out-of-head mass, "
        "entropy against q's",
    )
    return figure
