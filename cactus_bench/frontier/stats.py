"""Exact per-position statistics of every rule on the grid, vectorised over positions and grid.

An arm is one rule at one parameter value (`arms.py`). For each arm and position t (p_t, q_t on
their union support, `teacher_forcing.py`) this computes, with the rules' own exact functions
(`acceptance_probability` / `emitted_law`, or for the delta grids the same `samplers.exact`
functions fed gamma for all budgets at once):

    beta          sum_x p(x) P(accept x)                     exact acceptance probability
    <f>           D_f(law || q_t) for f in kl reverse_kl chi2 hellinger tv: the emitted law's
                  divergence (the quantity Theorem 3 bounds by min(Gamma(delta), D_f(p || q)))
    q_zero_mass   law's mass where q_t = 0 (where KL(law || q) is infinite)
    thm3_excess   D_f(law || q) - D_f(p || q) for the arm's budget f (Theorem 3's second bound;
                  > 0 is a violation, reported as a finding)
    exceed        sum_n p(n) 1[d_f(h_n || q) > delta]         drafts whose target breaks the budget
    excess        sum_n p(n) max(0, d_f(h_n || q) - delta)    by how much (nats for KL)
    exceed_any    1[some draft n with p(n) > 0 breaks it]      (Corollary 6; cactus rules only)
    stop_mass     law(S), S the pair's stop set (`tasks.stop_set`; NaN when no S is given)
    out_of_head   law's mass on tokens with q_t(x) < c max q_t (c: `head_fraction`)
    emitted_entropy  H(law_t) in nats

and the verifier's entropy H(q_t) (q_t's own marked masses: `marked_masses`). A rule whose test
reads the sources' temperature-1 laws (`Arm.reads_unscaled`) is evaluated on the chunk's full
rows with p̄_t, q̄_t (`teacher.FullRows`): its statistics are the same functions of its law,
only its test sees the whole index space.
Cactus's target for draft n is h_n = (gamma_n at n, q rescaled elsewhere), so d_f(h_n || q)
is the binary divergence d_f(gamma_n; q(n)) (Theorem 2).
The cactus grids also return overshoot cells: sums over positions of the draft mass p(n) and of
the overshooting draft mass, binned by q(n) and gamma_n (Corollary 6: KL <= delta is guaranteed
only for gamma <= 1/2).
"""

from __future__ import annotations

import torch

from cactus_bench.frontier.arms import Arm
from cactus_bench.frontier.conf import HEAD_FRACTION
from cactus_bench.frontier.teacher_forcing import on_support, support_index
from cactus_bench.samplers import (
    DIVERGENCES,
    binary_divergence,
    exact_gamma,
    full_divergence,
    taylor_gamma,
)
from cactus_bench.samplers.exact import boosted_acceptance, boosted_law, normalised

STATISTICS = (
    "beta",
    *DIVERGENCES,
    "q_zero_mass",
    "thm3_excess",
    "exceed",
    "excess",
    "exceed_any",
    "stop_mass",
    "out_of_head",
    "emitted_entropy",
)
Q_EDGES = (0.0, 0.05, 0.1, 0.25, 0.5, 1.0)  # overshoot cells: q(n) bins ...
GAMMA_EDGES = (0.0, 0.5, 1.0)  # ... and gamma_n <= 1/2 or above (Corollary 6)
_EXCEED_RTOL = 1e-9  # d_f > delta (1 + rtol) + atol: the exact solver's certified roots
_EXCEED_ATOL = 1e-12  # sit on the boundary and must not count as overshoot by rounding


def grid_size(arms: list[Arm]) -> int:
    """The most arms evaluated in one vectorised call (one delta grid)."""
    sizes = [
        sum(1 for a in arms if (a.kind, a.divergence) == key)
        for key in {(a.kind, a.divergence) for a in arms if a.kind in ("cactus", "cactus_exact")}
    ]
    return max(sizes, default=1)


def token_marks(q, stop, head_fraction: float) -> dict[str, torch.Tensor]:
    """[C, K] q (and [C, K] bool stop or None) -> {statistic: [C, K] bool}: the tokens whose
    mass a law's `stop_mass` and `out_of_head` sum (the stop set; q(x) < c max q)."""
    marks = {"out_of_head": q < head_fraction * q.amax(-1, keepdim=True)}
    if stop is not None:
        marks["stop_mass"] = stop
    return marks


def marked_masses(law, marks: dict) -> dict[str, torch.Tensor]:
    """[..., K] law -> {statistic: [...] law's mass on the marked tokens}."""
    return {name: (law * mark).sum(-1) for name, mark in marks.items()}


def _law_statistics(law, q, pq: dict, budget: str | None, marks: dict) -> dict[str, torch.Tensor]:
    """[..., K] law and q -> per-row D_f(law || q) for every f, q_zero_mass, the marked masses
    (`token_marks`), H(law) and, for an arm with a budget f, Theorem 3's D_f(law || q) -
    D_f(p || q) (pq: {f: [C]} D_f(p || q))."""
    stats = {f: full_divergence(law, q, f).clamp(min=0) for f in DIVERGENCES}
    stats["q_zero_mass"] = (law * (q == 0)).sum(-1)
    stats.update(marked_masses(law, marks))
    stats["emitted_entropy"] = entropy(law)
    if budget is not None:
        own = stats[budget]
        stats["thm3_excess"] = torch.where(
            own == pq[budget], torch.zeros_like(own), own - pq[budget]
        )
    return stats


def pair_divergences(p, q) -> dict[str, torch.Tensor]:
    """{f: [C] D_f(p || q)}: Theorem 3's second bound at each position."""
    return {f: full_divergence(p, q, f).clamp(min=0) for f in DIVERGENCES}


def _grid_statistics(p, q, pq, arms: list[Arm], marks) -> tuple[dict, torch.Tensor]:
    """One delta grid (cactus, or cactus_exact with one divergence): [D, C] per statistic, and
    the overshoot cells [D, len(Q_EDGES) - 1, len(GAMMA_EDGES) - 1, 2] (draft mass, overshoot)."""
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
    stats.update(_law_statistics(boosted_law(p, q, gamma), q, pq, divergence, marks))
    target = binary_divergence(gamma, q, divergence)  # d_f(h_n || q) for every draft n
    breaks = (target > grid * (1 + _EXCEED_RTOL) + _EXCEED_ATOL) & (p > 0)
    stats["exceed"] = (p * breaks).sum(-1)
    stats["excess"] = (p * (target - grid).clamp(min=0) * breaks).sum(-1)
    stats["exceed_any"] = breaks.any(-1).double()
    return stats, _overshoot_cells(p, q, gamma, breaks)


def _overshoot_cells(p, q, gamma, breaks) -> torch.Tensor:
    """[D, Qb, Gb, 2]: sum over positions and drafts n of p(n) and p(n) 1[breaks], by cell."""
    q_bin = torch.bucketize(q, torch.tensor(Q_EDGES[1:-1], dtype=q.dtype), right=True)
    g_bin = torch.bucketize(gamma, torch.tensor(GAMMA_EDGES[1:-1], dtype=q.dtype), right=False)
    num_q, num_g = len(Q_EDGES) - 1, len(GAMMA_EDGES) - 1
    cell = (q_bin * num_g + g_bin).expand_as(gamma).reshape(gamma.shape[0], -1)  # [D, C K]
    weights = p.expand_as(gamma).reshape(gamma.shape[0], -1)
    out = torch.zeros(gamma.shape[0], num_q * num_g, 2, dtype=torch.float64)
    out[..., 0].scatter_add_(1, cell, weights)
    out[..., 1].scatter_add_(1, cell, weights * breaks.reshape(gamma.shape[0], -1))
    return out.view(gamma.shape[0], num_q, num_g, 2)


def stop_first(p, q, stop) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """[C, K] p, q on the support and [C, K] bool stop -> ([C, s + K] p, q, stop mask, s) with
    each row's stop entries moved to columns 0..s-1 (s: the most stop entries of a row; zero
    columns pad the rest) and zeroed where they were. Cactus's law and the stop guard commute with
    a permutation of the tokens (no argmax tie to break) and give a zero-mass token nothing, so
    the law on these rows is the law on the support rearranged, and the guard is handed the same
    stop ids (0..s-1) for every row."""
    width = max(int(stop.sum(-1).max()), 1) if stop.numel() else 1
    order = torch.argsort((~stop).to(torch.int8), dim=-1, stable=True)[:, :width]  # stops first
    taken = stop.gather(-1, order)  # [C, s]: a real stop entry (else a padding column)
    zero = p.new_zeros(())
    head_p, head_q = (torch.where(taken, rows.gather(-1, order), zero) for rows in (p, q))
    rest_p, rest_q = (torch.where(stop, zero, rows) for rows in (p, q))
    padded_stop = torch.cat([taken, torch.zeros_like(stop)], -1)
    return torch.cat([head_p, rest_p], -1), torch.cat([head_q, rest_q], -1), padded_stop, width


def _arm_statistics(p, q, pq, arm: Arm, marks, stop=None, head=HEAD_FRACTION):
    """One arm's {name: [1, C]} statistics on the compact rows (an arm whose test reads only p,
    q). An arm with stop=exact runs on `stop_first`'s rows (stop [C, K] bool, the stop set)."""
    sampler = arm.sampler()
    if arm.stop_exact:
        if stop is None:
            raise ValueError(f"{arm.rule} {arm.parameter} needs the stop set: pass stop_ids")
        p, q, stop, width = stop_first(p, q, stop)
        marks = token_marks(q, stop, head)
        sampler.stop_ids = torch.arange(width, device=p.device)  # the same columns in every row
    beta, law = sampler.acceptance_and_law(p, q)
    stats = {"beta": beta, **_law_statistics(law, q, pq, arm.budget_divergence, marks)}
    return {name: value.unsqueeze(0) for name, value in stats.items()}  # [1, C]


def _full_row_statistics(full, p, q, arms: dict[int, Arm], chunk_elements, head, out) -> None:
    """Fill out[name][index] for each {index: arm} that reads p̄, q̄, block by block on the full
    rows (O(chunk_elements) numbers per temporary). Each block's laws are converted and pq
    computed once for all those arms, and each arm's plan runs once (`acceptance_and_law`: the
    test on full rows is the expensive part). The divergences are then taken on the union support
    of p and q, where every rule of `samplers/rules/` puts its law (a = pi / p and r = (pi - p)+
    with pi built from p and q, or r = q, or argmax q); a law with mass outside it is measured on
    the full rows instead, so the statistics stay exact for any rule."""
    if full is None:
        arm = next(iter(arms.values()))
        raise ValueError(
            f"{arm.rule} {arm.parameter} reads the temperature-1 laws: build the chunks with "
            "iter_chunks(..., unscaled=True)"
        )
    step = max(1, chunk_elements // full.p.shape[-1])
    for start in range(0, p.shape[0], step):
        block = slice(start, start + step)
        laws = normalised(full.p[block], full.q[block]) + normalised(
            full.p_bar[block], full.q_bar[block]
        )  # 4 x [b, V'] float64
        index, valid = support_index(*laws[:2])  # [b, K]
        outside_support = ~((laws[0] > 0) | (laws[1] > 0))  # [b, V']
        q_compact = on_support(laws[1], index, valid)
        stop = None if full.stop is None else full.stop.to(index.device).expand_as(laws[1])
        marks = token_marks(laws[1], stop, head)  # on V' ...
        compact_marks = {  # ... and on the support
            name: on_support(mark, index, valid) for name, mark in marks.items()
        }
        pq = pair_divergences(p[block], q[block])
        for arm_index, arm in arms.items():
            beta, law = arm.sampler().acceptance_and_law(*laws)  # [b], [b, V']
            if bool((law * outside_support).any()):  # mass where p = q = 0: measure it all
                stats = _law_statistics(law, laws[1], pq, arm.budget_divergence, marks)
            else:
                law_compact = on_support(law, index, valid)
                stats = _law_statistics(
                    law_compact, q_compact, pq, arm.budget_divergence, compact_marks
                )
            stats["beta"] = beta
            for name, value in stats.items():
                out[name][arm_index, block] = value.to("cpu", torch.float64)


def entropy(q: torch.Tensor) -> torch.Tensor:
    """[..., K] -> [...] H(q) in nats."""
    return -torch.special.xlogy(q, q).sum(-1)


def chunk_statistics(
    p, q, arms: list[Arm], chunk_elements: int, full=None, stop=None, head=HEAD_FRACTION
):
    """[C, K] p, q -> ({statistic: [A, C] float64 (NaN where it does not apply)},
    overshoot cells [A, Qb, Gb, 2] summed over the chunk (zero for arms without a grid)).
    full: the same positions on the whole index space with p̄, q̄ (`teacher.FullRows`), for the
    arms that read the temperature-1 laws. stop: [C, K] bool, the stop set on the support
    (`Chunk.stop`; None: no stop_mass); head: c of `out_of_head`."""
    rows = p.shape[0]
    out = {
        name: torch.full((len(arms), rows), torch.nan, dtype=torch.float64) for name in STATISTICS
    }
    cells = torch.zeros(len(arms), len(Q_EDGES) - 1, len(GAMMA_EDGES) - 1, 2, dtype=torch.float64)
    groups: dict[tuple, list[int]] = {}
    unscaled = {index: arm for index, arm in enumerate(arms) if arm.reads_unscaled}
    if unscaled:
        _full_row_statistics(full, p, q, unscaled, chunk_elements, head, out)
    for index, arm in enumerate(arms):
        if arm.reads_unscaled:
            continue
        key = (arm.kind, arm.divergence) if arm.kind in ("cactus", "cactus_exact") else index
        groups.setdefault(key, []).append(index)
    widest = max((len(g) for g in groups.values()), default=1)
    step = max(1, chunk_elements // max(1, p.shape[-1] * widest))
    for start in range(0, rows, step):  # O(step x K x D) memory whatever the chunk
        block = slice(start, start + step)
        pq = pair_divergences(p[block], q[block])
        marks = token_marks(q[block], None if stop is None else stop[block], head)
        for indices in groups.values():
            members = [arms[i] for i in indices]
            if members[0].kind in ("cactus", "cactus_exact"):
                stats, grid_cells = _grid_statistics(p[block], q[block], pq, members, marks)
                cells[indices] += grid_cells
            else:
                rows = None if stop is None else stop[block]
                stats = _arm_statistics(p[block], q[block], pq, members[0], marks, rows, head)
            for name, value in stats.items():
                out[name][indices, block] = value.to("cpu", torch.float64)
    for name in ("beta", "kl", "tv", "q_zero_mass", "out_of_head", "emitted_entropy"):  # never NaN
        bad = torch.isnan(out[name]).any(-1).nonzero().flatten().tolist()
        if bad:
            arm = arms[bad[0]]
            raise RuntimeError(f"NaN in {name} of {arm.rule} {arm.parameter}: report this input")
    return out, cells
