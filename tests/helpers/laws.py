"""Exact laws and the statistics that test samples against them.

- `chi_square_p_value` / `P_VALUE_FLOOR`: Pearson goodness of fit against a law given as a dict,
  at the suite's fixed rejection level (fixed seeds make each test deterministic);
- `chi_square` / `CHI2_999`: the statistic and degrees of freedom against a law tensor, and the
  99.9% quantiles to compare it with;
- `next_token_law`: the verifier's processed law of the next token (one uncached forward);
- `RULES` / `RULE_IDS`, `P_SMALL` / `Q_SMALL`: every rule with test parameters, and a small pair
  with zeros on both sides and real disagreement;
- `step_law` / `laws`: FLy's exact law of a whole verification step, enumerated by brute force
  (tests/test_samplers_fly.py says whose loop it restates), and random laws to feed it.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict

import torch

from cactus_bench.engine import process_logits

P_VALUE_FLOOR = 1e-3  # fixed seeds make each test deterministic; this is the rejection level


def chi_square_p_value(counts: Counter, law: dict, n: int) -> float:
    """Pearson goodness of fit; cells expected < 5 times are pooled (asymptotics hold)."""
    observed_outside = sum(c for key, c in counts.items() if key not in law)
    if observed_outside:
        return 0.0  # an outcome of probability zero
    stat, df, pooled_obs, pooled_exp = 0.0, -1, 0, 0.0
    for key, prob in law.items():
        expected = n * prob
        if expected < 5:
            pooled_obs, pooled_exp = pooled_obs + counts.get(key, 0), pooled_exp + expected
            continue
        stat += (counts.get(key, 0) - expected) ** 2 / expected
        df += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        df += 1
    # Survival function of chi-square(df): regularised upper incomplete gamma.
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), torch.tensor(stat / 2.0)))


@torch.inference_mode()
def next_token_law(model, token_ids, sampling) -> torch.Tensor:
    """[V] processed law of the next token after token_ids (one uncached forward)."""
    logits = model(input_ids=torch.tensor([token_ids])).logits[0, -1]
    probs = process_logits(logits, sampling).double()
    return probs / probs.sum()


# Chi-square 99.9% quantiles by degrees of freedom (fixed seed, so the test is deterministic).
CHI2_999 = {1: 10.83, 2: 13.82, 3: 16.27, 4: 18.47, 5: 20.52}


def chi_square(counts: torch.Tensor, law: torch.Tensor) -> tuple[float, int]:
    total = counts.sum()
    support = law > 1e-12
    assert counts[~support].sum() == 0, "emitted a token the exact law gives zero mass"
    expected = law[support] * total
    stat = ((counts[support] - expected) ** 2 / expected).sum().item()
    return stat, int(support.sum()) - 1


RULES = [
    ("sps", {}),
    ("cactus", {"delta": 0.75}),
    ("cactus_exact", {"delta": 0.5, "divergence": "kl"}),
    ("cactus_exact", {"delta": 0.3, "divergence": "reverse_kl"}),
    ("cactus_exact", {"delta": 0.5, "divergence": "chi2"}),
    ("cactus_exact", {"delta": 0.2, "divergence": "hellinger"}),
    ("cactus_exact", {"delta": 0.1, "divergence": "tv"}),
    ("tas", {"threshold": 0.3}),
    ("interp", {"alpha": 0.4}),
    ("topk", {"k": 2}),
    ("greedy", {}),
    # The rules of samplers/rules/; those whose test reads the temperature-1 laws read p, q here
    # (verify gets no unscaled laws in these tests; test_samplers_lossy.py covers them).
    ("mentored", {"delta": 0.2}),
    ("lenience", {"l": 0.4}),
    ("chow", {"alpha": 0.55, "test_law": "processed"}),
    ("diff", {"alpha": 0.1, "test_law": "processed"}),
    ("opt", {"alpha": 0.5, "test_law": "processed"}),
    ("tokenv1", {"alpha": 0.1, "test_law": "processed"}),
    ("tokenv2", {"alpha": 0.15, "test_law": "processed"}),
    ("tokenv3", {"alpha": 0.5, "test_law": "processed"}),
    ("fsd", {"threshold": 0.3, "div": "js", "test_law": "processed"}),
    ("fsd_reducible", {"threshold": 0.3, "div": "tv", "test_law": "processed"}),
    ("fsd_unsmoothed", {"threshold": 0.3, "div": "js", "test_law": "processed"}),
    ("bild", {"tau": 1.5, "test_law": "processed"}),
    ("ensemble", {"w": 0.6}),
    ("topband", {"alpha": 0.2}),
    ("topband_cascade", {"alpha": 0.5, "beta": 0.8}),
    ("additive", {"acceptance_threshold": 0.2}),
    ("greedy_margin", {"margin": 0.5}),
]
RULE_IDS = [f"{name}-{'-'.join(map(str, kw.values()))}" for name, kw in RULES]

# A small pair with zeros on both sides (truncated distributions) and real disagreement.
P_SMALL = torch.tensor([0.05, 0.40, 0.15, 0.0, 0.25, 0.15], dtype=torch.float64)
Q_SMALL = torch.tensor([0.30, 0.25, 0.25, 0.10, 0.0, 0.10], dtype=torch.float64)


def top_entropy(q: list[float], k: int = 3) -> float:
    return -sum(x * math.log(x) for x in sorted(q, reverse=True)[:k] if x > 0)


def kernel_accepted(native, can_defer, gated, window: int) -> int:
    """Accepted drafts of one step, vLLM 0.34's loop: `pending` is the held rejection."""
    m, accepted_length, pending = len(native), 0, -1
    for i in range(m):
        if pending >= 0:
            if not native[i]:  # only a native acceptance confirms a pending window
                return accepted_length
            if i - pending == window:
                accepted_length, pending = i + 1, -1
        elif native[i]:
            accepted_length = i + 1
        elif can_defer[i] and i + window < m and gated[i]:
            pending = i
        else:
            return accepted_length
    return accepted_length


def step_law(draft, target, theta: float, window: int, top_k: int = 3):
    """{emitted row (tuple): probability} of one FLy step; draft [m][V], target [m + 1][V]."""
    m, vocab = len(draft), len(draft[0])
    gated = [top_entropy(target[j], top_k) >= theta for j in range(m)]
    law: dict[tuple, float] = defaultdict(float)
    for drafts in itertools.product(range(vocab), repeat=m):
        weight = math.prod(draft[j][n] for j, n in enumerate(drafts))
        if weight == 0:
            continue
        native_accept = [min(1.0, target[j][n] / draft[j][n]) for j, n in enumerate(drafts)]
        can_defer = [draft[j][n] > 0 and target[j][n] > 0 for j, n in enumerate(drafts)]
        for native in itertools.product((True, False), repeat=m):
            chance = weight * math.prod(
                a if ok else 1 - a for a, ok in zip(native_accept, native, strict=True)
            )
            if chance == 0:
                continue
            k = kernel_accepted(native, can_defer, gated, window)
            if k < m:
                last = [max(q - p, 0.0) for p, q in zip(draft[k], target[k], strict=True)]
            else:
                last = list(target[m])
            total = sum(last)
            for token, mass in enumerate(last):
                if mass > 0:
                    law[(*drafts[:k], token)] += chance * mass / total
    return dict(law)


def laws(seed: int, m: int, vocab: int):
    """[m, V] drafter and [m + 1, V] verifier laws, one per position, with a zero or two."""
    gen = torch.Generator().manual_seed(seed)
    draft = (torch.randn(m, vocab, generator=gen, dtype=torch.float64) * 1.5).softmax(-1)
    target = (torch.randn(m + 1, vocab, generator=gen, dtype=torch.float64) * 1.5).softmax(-1)
    target[0, 0] = 0.0  # a draft the verifier rules out: never deferred
    return draft, target / target.sum(-1, keepdim=True)
