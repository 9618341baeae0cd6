"""Exact per-position statistics of every rule on the grid, vectorised over positions and grid.

An arm is one rule at one parameter value. For each arm and position t (p_t, q_t on their union
support, `teacher.py`) this computes, with the rules' own exact functions
(`AcceptanceRule.acceptance_probability` / `emitted_law`, or for the delta grids the same
`samplers.exact` functions fed gamma for all budgets at once):

    beta        sum_x p(x) P(accept x)                       exact acceptance probability
    kl, tv      KL(law || q_t), TV(law, q_t)                 law = the emitted token's exact law
    budget      D_f(law || q_t) for the rule's own divergence (cactus: KL; no budget: NaN)
    q_zero_mass law's mass where q_t = 0 (where KL(law || q) is infinite)
    exceed      sum_n p(n) 1[d_f(h_n || q) > delta]          drafts whose target breaks the budget
    excess      sum_n p(n) max(0, d_f(h_n || q) - delta)     by how much (nats for KL)
    exceed_any  1[some draft n with p(n) > 0 breaks it]       (Corollary 6; cactus rules only)

and the verifier's entropy H(q_t). Cactus's target for draft n is h_n = (gamma_n at n, q
rescaled elsewhere), so d_f(h_n || q) is the binary divergence d_f(gamma_n; q(n)) (Theorem 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cactus_bench.frontier.conf import FrontierConf
from cactus_bench.samplers import (
    binary_divergence,
    exact_gamma,
    full_divergence,
    make_sampler,
    taylor_gamma,
)
from cactus_bench.samplers.exact import boosted_acceptance, boosted_law

STATISTICS = ("beta", "kl", "tv", "budget", "q_zero_mass", "exceed", "excess", "exceed_any")
_EXCEED_RTOL = 1e-9  # d_f > delta (1 + rtol) + atol: the exact solver's certified roots
_EXCEED_ATOL = 1e-12  # sit on the boundary and must not count as overshoot by rounding


@dataclass(frozen=True)
class Arm:
    """One rule at one parameter value: the CSV's rule and parameter columns."""

    family: str  # sps cactus cactus_exact tas topk interp greedy
    value: float | None = None  # delta, threshold, k or alpha
    divergence: str | None = None  # cactus_exact's f (cactus: its budget is KL)

    @property
    def rule(self) -> str:
        return f"{self.family}:{self.divergence}" if self.family == "cactus_exact" else self.family

    @property
    def parameter(self) -> str:
        key = {"cactus": "delta", "cactus_exact": "delta", "tas": "eps", "topk": "k",
               "interp": "alpha"}.get(self.family)  # fmt: skip
        if key is None:
            return ""
        return f"{key}={int(self.value) if key == 'k' else self.value:g}"

    def sampler(self):
        """The acceptance rule this arm runs (make_sampler's name and parameters)."""
        params = {
            "cactus": {"delta": self.value},
            "cactus_exact": {"delta": self.value, "divergence": self.divergence},
            "tas": {"threshold": self.value},
            "topk": {"k": int(self.value) if self.value is not None else None},
            "interp": {"alpha": self.value},
        }.get(self.family, {})
        return make_sampler(self.family, **params)


def build_arms(conf: FrontierConf) -> list[Arm]:
    """Every arm of the configured grid, sps first (every gain is measured against it)."""
    arms = [Arm("sps")]
    for family in conf.rules:
        if family == "cactus":
            arms += [Arm("cactus", float(d), "kl") for d in conf.deltas]
        elif family == "cactus_exact":
            arms += [
                Arm("cactus_exact", float(d), f) for f in conf.divergences for d in conf.deltas
            ]
        elif family == "tas":
            arms += [Arm("tas", float(e)) for e in conf.tas_thresholds]
        elif family == "topk":
            arms += [Arm("topk", float(k)) for k in conf.topk_ks]
        elif family == "interp":
            arms += [Arm("interp", float(a)) for a in conf.interp_alphas]
        elif family == "greedy":
            arms.append(Arm("greedy"))
    return arms


def grid_size(arms: list[Arm]) -> int:
    """The most arms evaluated in one vectorised call (one delta grid)."""
    sizes = [
        sum(1 for a in arms if (a.family, a.divergence) == key)
        for key in {
            (a.family, a.divergence) for a in arms if a.family in ("cactus", "cactus_exact")
        }
    ]
    return max(sizes, default=1)  # fmt: skip


def _law_statistics(law, q, budget_divergence: str | None) -> dict[str, torch.Tensor]:
    """[..., K] law and q -> per-row kl, tv, budget, q_zero_mass (float64, rounding clamped)."""
    kl = full_divergence(law, q, "kl").clamp(min=0)
    budget = kl if budget_divergence in (None, "kl") else full_divergence(law, q, budget_divergence)
    return {
        "kl": kl,
        "tv": full_divergence(law, q, "tv").clamp(min=0),
        "budget": budget.clamp(min=0) if budget_divergence else torch.full_like(kl, torch.nan),
        "q_zero_mass": (law * (q == 0)).sum(-1),
    }


def _grid_statistics(p, q, arms: list[Arm]) -> dict[str, torch.Tensor]:
    """One delta grid (cactus, or cactus_exact with one divergence): [D, C] per statistic."""
    family, divergence = arms[0].family, arms[0].divergence
    deltas = torch.tensor([a.value for a in arms], dtype=torch.float64, device=p.device)
    grid = deltas[:, None, None]  # [D, 1, 1] against [C, K]
    if family == "cactus":
        gamma = taylor_gamma(q, grid)  # [D, C, K]
    else:
        # gamma only matters where p > 0 (elsewhere nothing is drafted): solve just those, in
        # one flat call for the whole grid.
        shape = (len(arms), *q.shape)
        solve = (p > 0).expand(shape)
        gamma = q.expand(shape).clone()
        gamma[solve] = exact_gamma(q.expand(shape)[solve], grid.expand(shape)[solve], divergence)
    stats = {"beta": boosted_acceptance(p, gamma)}
    stats.update(_law_statistics(boosted_law(p, q, gamma), q, divergence))
    target = binary_divergence(gamma, q, divergence)  # d_f(h_n || q) for every draft n
    breaks = (target > grid * (1 + _EXCEED_RTOL) + _EXCEED_ATOL) & (p > 0)
    stats["exceed"] = (p * breaks).sum(-1)
    stats["excess"] = (p * (target - grid).clamp(min=0) * breaks).sum(-1)
    stats["exceed_any"] = breaks.any(-1).double()
    return stats


def _arm_statistics(p, q, arm: Arm) -> dict[str, torch.Tensor]:
    rule = arm.sampler()
    stats = {"beta": rule.acceptance_probability(p, q)}
    stats.update(_law_statistics(rule.emitted_law(p, q), q, None))
    return {name: value.unsqueeze(0) for name, value in stats.items()}  # [1, C]


def entropy(q: torch.Tensor) -> torch.Tensor:
    """[..., K] -> [...] H(q) in nats."""
    return -torch.special.xlogy(q, q).sum(-1)


def chunk_statistics(p, q, arms: list[Arm], chunk_elements: int) -> dict[str, torch.Tensor]:
    """[C, K] p, q -> {statistic: [A, C] float64 (NaN where it does not apply)}."""
    rows = p.shape[0]
    out = {
        name: torch.full((len(arms), rows), torch.nan, dtype=torch.float64) for name in STATISTICS
    }
    groups: dict[tuple, list[int]] = {}
    for index, arm in enumerate(arms):
        key = (arm.family, arm.divergence) if arm.family in ("cactus", "cactus_exact") else index
        groups.setdefault(key, []).append(index)
    step = max(1, chunk_elements // max(1, p.shape[-1] * max(len(g) for g in groups.values())))
    for start in range(0, rows, step):  # O(step x K x D) memory whatever the chunk
        block = slice(start, start + step)
        for indices in groups.values():
            members = [arms[i] for i in indices]
            if members[0].family in ("cactus", "cactus_exact"):
                stats = _grid_statistics(p[block], q[block], members)
            else:
                stats = _arm_statistics(p[block], q[block], members[0])
            for name, value in stats.items():
                out[name][indices, block] = value.to("cpu", torch.float64)
    for name in ("beta", "kl", "tv", "q_zero_mass"):  # defined for every arm: never NaN
        bad = torch.isnan(out[name]).any(-1).nonzero().flatten().tolist()
        if bad:
            arm = arms[bad[0]]
            raise RuntimeError(f"NaN in {name} of {arm.rule} {arm.parameter}: report this input")
    return out
