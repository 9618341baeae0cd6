"""The frontier's arms: one rule at one parameter value, built from the configured grids.

An arm's `rule` and `parameter` are the CSV's columns (`cactus_exact:kl`, `delta=0.5`). Rules
of `samplers/rules/` whose test reads the temperature-1 laws (the cascades, FSD, BiLD) run at
their default test_law=unscaled, as in the HF engine: the teacher pass gives them p̄, q̄
(`teacher.FullRows`, `Arm.reads_unscaled`).

A guarded arm is Cactus at one delta with one position-free guard (docs/rules.md, Guards): its
rule column names the guard (`cactus+stop=exact`, `cactus+near_top=0.2`), and it is measured as
a rule of its own (no delta-grid statistics: its target is no longer Cactus's h_n).
"""

from __future__ import annotations

from dataclasses import dataclass

from cactus_bench.frontier.conf import FrontierConf, parse_guard
from cactus_bench.samplers import RULES, make_sampler
from cactus_bench.samplers.catalogue import rule_info

# family -> (FrontierConf grid field, the rule's parameter, the CSV label of its value)
GRIDS = {
    "cactus": ("deltas", "delta", "delta"),
    "cactus_exact": ("deltas", "delta", "delta"),
    "mentored": ("deltas", "delta", "delta"),
    "tas": ("tas_thresholds", "threshold", "eps"),
    "topk": ("topk_ks", "k", "k"),
    "interp": ("interp_alphas", "alpha", "alpha"),
    "lenience": ("lenience_ls", "l", "l"),
    **{
        rule: ("cascade_alphas", "alpha", "alpha")
        for rule in ("chow", "diff", "opt", "tokenv1", "tokenv2", "tokenv3")
    },
    "fsd": ("fsd_thresholds", "threshold", "T"),
    "fsd_reducible": ("fsd_thresholds", "threshold", "T"),
    "fsd_unsmoothed": ("fsd_thresholds", "threshold", "T"),
    "bild": ("bild_taus", "tau", "tau"),
    "topband": ("topband_alphas", "alpha", "alpha"),
    "topband_cascade": ("topband_betas", "beta", "beta"),  # OPT's alpha at its default, 0.5
    "additive": ("additive_thresholds", "acceptance_threshold", "t"),
    "greedy_margin": ("greedy_margins", "margin", "K"),
}
BUDGETED = ("cactus", "cactus_exact", "mentored")  # arms with a divergence budget delta
# The f each budgeted family bounds: cactus KL(h || q); mentored KL(q || pi), the reverse KL.
BUDGET_DIVERGENCE = {"cactus": "kl", "mentored": "reverse_kl"}


@dataclass(frozen=True)
class Arm:
    """One rule at one parameter value: the CSV's rule and parameter columns."""

    family: str  # sps, a key of GRIDS, or greedy
    value: float | None = None  # the grid's value (delta, threshold, k, alpha, l, T, tau)
    divergence: str | None = None  # cactus_exact's f (cactus: KL)
    guard: str = ""  # one guard as `name=value` (stop=exact, near_top=0.2); "" for none

    @property
    def kind(self) -> str:
        """The family, or `family+guard` for a guarded arm: what the grid statistics key on."""
        return f"{self.family}+{self.guard}" if self.guard else self.family

    @property
    def rule(self) -> str:
        return f"{self.family}:{self.divergence}" if self.family == "cactus_exact" else self.kind

    @property
    def stop_exact(self) -> bool:
        """True when the arm's law needs the stop set on its rows (the guard stop=exact)."""
        return self.guard == "stop=exact"

    @property
    def budget_divergence(self) -> str | None:
        """The f whose D_f(law || q) the arm's delta bounds per draft (None: no budget)."""
        if self.guard:  # a guard changes the law: the budget's bound is Cactus's, not its
            return None
        if self.family == "cactus_exact":
            return self.divergence
        return BUDGET_DIVERGENCE.get(self.family)

    @property
    def parameter(self) -> str:
        if self.family not in GRIDS:
            return ""
        label = GRIDS[self.family][2]
        return f"{label}={int(self.value) if label == 'k' else self.value:g}"

    @property
    def reads_unscaled(self) -> bool:
        """True for the rules whose test reads the sources' temperature-1 laws (a `test_law`
        parameter, unscaled by default): their statistics need p̄, q̄ on the whole index space."""
        return self.family in RULES and rule_info(self.family).param("test_law") is not None

    def sampler(self):
        """The acceptance rule this arm runs (make_sampler's name and parameters)."""
        params = {}
        if self.family in GRIDS:
            name = GRIDS[self.family][1]
            params[name] = int(self.value) if name == "k" else self.value
        if self.family == "cactus_exact":
            params["divergence"] = self.divergence
        if self.guard:
            params.update([parse_guard(self.guard)])
        return make_sampler(self.family, **params)


def build_arms(conf: FrontierConf) -> list[Arm]:
    """Every arm of the configured grid, sps first (every gain is measured against it)."""
    arms = [Arm("sps")]
    for family in conf.rules:
        if family == "sps":
            continue
        if family not in GRIDS:  # greedy, or a rule without a grid here: its defaults
            arms.append(Arm(family))
        elif family == "cactus_exact":
            arms += [Arm(family, float(d), f) for f in conf.divergences for d in conf.deltas]
        else:
            values = getattr(conf, GRIDS[family][0])
            arms += [Arm(family, float(v), "kl" if family == "cactus" else None) for v in values]
    if "cactus" in conf.rules:  # Cactus with each guard, at the guarded deltas
        arms += [Arm("cactus", float(d), "kl", g) for g in conf.guards for d in conf.guard_deltas]
    return arms
