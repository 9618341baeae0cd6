"""A speculative step's cost on one device from its measured parts, and the speedup it forecasts.

From one `make gpu-bench` run's files (gpu_forward.csv, gpu_verify.csv, gpu_engine.csv; batch 1):

    spec step(m)  = m t_draft + t_verify(m + 1) + t_rule(m) + o_step + m o_draft
    verifier token = t_verify(1) + o_step
    forecast speedup = (AL + 1) verifier token / spec step

- t_draft: one drafter forward of one token (graph replay where captured); t_verify(n): one
  verifier forward of n tokens (linear in n between and beyond the measured n, each use says
  whether its n was measured); t_rule(m): the rule's `verify` as the engine calls it (eager).
- o_step: the rest of a step, per step: the verifier-alone engine step less its forward.
- o_draft: the rest per draft (draws, sampling, the drafter's bookkeeping): from one SpS engine
  step at `fit_m`, less its forwards, rule and o_step, divided by `fit_m`.
- AL: accepted drafts a step (bonus not counted); each forecast names its acceptance source.
  Prefill is left out.

`engine_check` holds the model to the engine's own measured steps on the same card (the rows the
fit did not use): within 10 % or the gap is printed. Random weights accept nothing, so an engine
step there is a cost, not a speedup; only the forecast joins costs to an acceptance.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

TOLERANCE = 0.10  # the forecast's step against the engine's measured step


@dataclass(frozen=True)
class Costs:
    device: str
    drafter_s: float  # one drafter forward, batch 1, one token
    forwards: dict  # role -> [(tokens n, seconds)] at batch 1, sorted by n
    rules: dict  # rule name -> [(m, seconds)] at batch 1, eager, sorted by m
    step_overhead_s: float  # o_step
    draft_overhead_s: float  # o_draft
    fitted_on: str  # the engine rows o_step and o_draft come from

    def forward_s(self, role: str, tokens: int) -> tuple[float, bool]:
        """(seconds, whether n = tokens was measured) of one `role` forward at batch 1."""
        return interpolate(self.forwards[role], tokens)

    def rule_s(self, rule: str, m: int) -> float:
        return interpolate(self.rules[rule], m)[0]

    def spec_step_s(self, role: str, rule: str, m: int) -> float:
        drafts = m * (self.drafter_s + self.draft_overhead_s)
        verify = self.forward_s(role, m + 1)[0]
        return drafts + verify + self.rule_s(rule, m) + self.step_overhead_s

    def verifier_token_s(self, role: str) -> float:
        return self.forward_s(role, 1)[0] + self.step_overhead_s

    def speedup(self, role: str, rule: str, m: int, al: float) -> float:
        return (al + 1.0) * self.verifier_token_s(role) / self.spec_step_s(role, rule, m)


def interpolate(points: list, x: float) -> tuple[float, bool]:
    """(y at x, whether x is a measured point): linear through the two nearest points, the end
    segment extended beyond them; one point is a constant."""
    exact = [y for px, y in points if px == x]
    if exact:
        return exact[0], True
    if len(points) == 1:
        return points[0][1], False
    above = [i for i, (px, _) in enumerate(points) if px > x]
    right = min(max(above[0] if above else len(points) - 1, 1), len(points) - 1)
    left, right = points[right - 1], points[right]
    slope = (right[1] - left[1]) / (right[0] - left[0])
    return left[1] + slope * (x - left[0]), False


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def costs_from_rows(
    forwards, verifies, engines, fit_arm: str = "sps", fit_m: int = 4, batch: int = 1
) -> Costs:
    """Costs at `batch` rows from gpu_forward.csv, gpu_verify.csv and gpu_engine.csv rows
    (csv.DictReader)."""
    measured = [r for r in forwards if r["seconds"] and int(r["batch"]) == batch]
    path = "graph" if any(r["path"] == "graph" for r in measured) else "eager"
    by_role: dict[str, list] = {}
    for row in measured:
        if row["path"] == path:
            by_role.setdefault(row["role"], []).append((int(row["tokens_per_row"]), _f(row)))
    rules: dict[str, list] = {}
    for row in verifies:
        if row["path"] == "eager" and row["seconds"] and int(row["batch"]) == batch:
            rules.setdefault(row["rule"], []).append((int(row["m"]), _f(row)))
    forwards_by_role = {role: sorted(points) for role, points in by_role.items()}
    drafter_s = interpolate(forwards_by_role["drafter"], 1)[0]
    verifier = [r for r in engines if r["arm"] == "verifier" and int(r["batch"]) == batch]
    fit = [r for r in engines if _is(r, fit_arm, fit_m, batch)]
    if not verifier or not fit:
        raise ValueError(f"gpu_engine.csv lacks the verifier or {fit_arm} m = {fit_m} at {batch}")
    verifier_forward_s = interpolate(forwards_by_role["verifier"], 1)[0]
    step_overhead = float(verifier[0]["mean_step_s"]) - verifier_forward_s
    rules_by_name = {name: sorted(points) for name, points in rules.items()}
    device = verifier[0].get("device", "")
    partial = Costs(device, drafter_s, forwards_by_role, rules_by_name, step_overhead, 0.0, "")
    rest = float(fit[0]["mean_step_s"]) - partial.spec_step_s("verifier", fit_arm, fit_m)
    fitted_on = f"{path} forwards; engine verifier and {fit_arm} m = {fit_m}, batch {batch}"
    costs = (device, drafter_s, forwards_by_role, rules_by_name, step_overhead)
    return Costs(*costs, rest / fit_m, fitted_on)


def cost_table_rows(forwards, verifies, engines, rule: str = "cactus", m: int = 4) -> list[dict]:
    """The rule and overhead rows of a `report batch --cost-table` table (report/batch_cost.py)
    at every batch the engine ran: step_overhead, draft_overhead (per draft) and `rule`'s
    verify at m drafts, in seconds."""
    out = []
    for batch in sorted({int(r["batch"]) for r in engines}):
        try:
            costs = costs_from_rows(forwards, verifies, engines, batch=batch)
            parts = (costs.step_overhead_s, costs.draft_overhead_s, costs.rule_s(rule, m))
        except (KeyError, ValueError, IndexError):  # a part not measured at this batch
            continue
        for model, seconds in zip(("step_overhead", "draft_overhead", "rule"), parts, strict=True):
            entry = {"device": costs.device, "model": model, "batch": batch, "tokens_per_row": m}
            out.append({**entry, "seconds": seconds})
    return out


def _f(row: dict) -> float:
    return float(row["seconds"])


def _is(row: dict, arm: str, m: int, batch: int) -> bool:
    return row["arm"] == arm and int(row["m"]) == m and int(row["batch"]) == batch


def engine_check(costs: Costs, engines, fit_arm: str = "sps", fit_m: int = 4) -> list[dict]:
    """The forecast's step against each batch-1 speculative engine step the fit did not use."""
    out = []
    for row in engines:
        if row["arm"] == "verifier" or int(row["batch"]) != 1 or _is(row, fit_arm, fit_m, 1):
            continue
        m, measured = int(row["m"]), float(row["mean_step_s"])
        predicted = costs.spec_step_s("verifier", row["arm"], m)
        gap = predicted / measured - 1.0
        out.append(
            {
                "arm": row["arm"],
                "m": m,
                "measured_step_s": measured,
                "forecast_step_s": predicted,
                "gap": gap,
                "within_10pct": abs(gap) <= TOLERANCE,
            }
        )
    return out


@dataclass(frozen=True)
class Acceptance:
    label: str  # e.g. "paper, gsm8k"
    rule: str  # whose verify cost the step pays
    al: float  # accepted drafts a step, bonus not counted
    source: str  # where the AL comes from, printed with the forecast
    measured_at_m: int | None = None  # the m the AL was measured at, where not the cell's


def cell_forecast(
    costs: Costs, role: str, m: int, acceptances: list[Acceptance], name: str = ""
) -> list[dict]:
    """Rows of the forecast speedup of a (drafter -> `role` forward, m) cell at each acceptance;
    `name`: the verifier's name in the rows (default: the role)."""
    rows = []
    for accept in acceptances:
        verify_s, verify_measured = costs.forward_s(role, m + 1)
        rows.append(
            {
                "device": costs.device,
                "verifier": name or role,
                "m": m,
                "acceptance": accept.label,
                "rule": accept.rule,
                "al": accept.al,
                "forecast_speedup": costs.speedup(role, accept.rule, m, accept.al),
                "spec_step_s": costs.spec_step_s(role, accept.rule, m),
                "verifier_token_s": costs.verifier_token_s(role),
                "verify_forward_s": verify_s,
                "verify_forward": "measured" if verify_measured else "linear in n, not measured",
                "overhead_s": costs.step_overhead_s + m * costs.draft_overhead_s,
                "costs_from": costs.fitted_on,
                "acceptance_source": accept.source,
            }
        )
    return rows


def embedded_acceptance(sweep_csv: Path, task: str = "demo", delta: float = 1.0) -> Acceptance:
    """The embedded SmolLM2 pair's Cactus AL at batch 1 and the largest m of a sweep's CSV."""
    rows = [
        r
        for r in read_rows(sweep_csv)
        if r["sampler"] == "cactus" and r["task"] == task and r["al"] and int(r["batch"]) == 1
        if float(r["delta"] or "nan") == delta
    ]
    if not rows:
        raise ValueError(f"{sweep_csv}: no cactus delta {delta} row of task {task} at batch 1")
    row = max(rows, key=lambda r: float(r["m"]))
    m = int(float(row["m"]))
    source = (
        f"embedded pair {row['drafter_id']} -> {row['verifier_id']} on a CPU, {sweep_csv.name} "
        f"(task {task}, cactus delta {delta:g}, batch 1, m = {m}, commit {row['git_sha'][:7]}); "
        f"measured at m = {m}: at a longer m the AL can only grow"
    )
    return Acceptance(f"embedded pair's AL at m = {m}", "cactus", float(row["al"]), source, m)


def report_lines(costs: Costs, checks: list[dict], rows: list[dict]) -> list[str]:
    """The forecast as printed: the costs' origin, the engine checks, each cell, the sources."""
    lines = [
        f"forecast on {costs.device} from measured costs ({costs.fitted_on}): "
        f"o_step {costs.step_overhead_s * 1e3:.2f} ms, "
        f"o_draft {costs.draft_overhead_s * 1e3:.2f} ms"
    ]
    for check in checks:
        verdict = "within 10 %" if check["within_10pct"] else "OUTSIDE 10 %"
        lines.append(
            f"  engine check, {check['arm']} m = {check['m']}: forecast "
            f"{check['forecast_step_s'] * 1e3:.1f} ms vs measured "
            f"{check['measured_step_s'] * 1e3:.1f} ms, gap {check['gap']:+.1%} ({verdict})"
        )
    if not checks:
        lines.append("  engine check: no engine step beside the fitted one to check against")
    for row in rows:
        lines.append(
            f"  drafter -> {row['verifier']}, m = {row['m']}, {row['acceptance']} (AL "
            f"{row['al']:.2f}, {row['rule']}): {row['forecast_speedup']:.2f}x; step "
            f"{row['spec_step_s'] * 1e3:.1f} ms (overhead {row['overhead_s'] * 1e3:.1f} ms, verify "
            f"forward {row['verify_forward_s'] * 1e3:.1f} ms, {row['verify_forward']}) against "
            f"{row['verifier_token_s'] * 1e3:.1f} ms a verifier token"
        )
    sources = {row["acceptance"]: row["acceptance_source"] for row in rows}
    return lines + [f"  AL of {label}: {source}" for label, source in sources.items()]
