"""FSD as released: its divergence is the release's, smoothing included (docs/rules.md, F4).

The reference restates maxholsman/fsd `fsd_utils.py::_speculative_backoff_sampling` in its own
letters (q_d the drafter, p_t the verifier): both laws get `epsilon = 1e-10` and are
renormalised, then `F.kl_div(log input, target, reduction="none").sum(-1)`, which is
KL(target || input). Nothing here calls the package's divergence code.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.rules.fsd import fsd_divergence

RELEASE_EPSILON = 1e-10  # fsd_utils.py, `epsilon = 1e-10`


def release_divergence(draft: torch.Tensor, target: torch.Tensor, div_type: str) -> torch.Tensor:
    """[..., V] -> [...]: the release's divergence after its smoothing (module doc)."""
    q_d = (draft + RELEASE_EPSILON) / (draft + RELEASE_EPSILON).sum(-1, keepdim=True)
    p_t = (target + RELEASE_EPSILON) / (target + RELEASE_EPSILON).sum(-1, keepdim=True)
    if div_type == "kl_div":
        return F.kl_div(torch.log(p_t), q_d, reduction="none").sum(-1)
    if div_type == "kl_div_reversed":
        return F.kl_div(torch.log(q_d), p_t, reduction="none").sum(-1)
    if div_type == "js_div":
        m = 0.5 * (p_t + q_d)
        halves = 0.5 * F.kl_div(torch.log(p_t), m, reduction="none")
        return (halves + 0.5 * F.kl_div(torch.log(q_d), m, reduction="none")).sum(-1)
    return 0.5 * torch.abs(p_t - q_d).sum(-1)  # tv_div


RELEASE_NAMES = {"js": "js_div", "kl": "kl_div", "reverse_kl": "kl_div_reversed", "tv": "tv_div"}


def head_laws(seed: int, vocab: int = 64, head: int = 16):
    """[4, V] float64: a drafter whose head covers `head` ids (0 elsewhere, as the 8,192-id
    head of the embedded pair) and a verifier with full support."""
    gen = torch.Generator().manual_seed(seed)
    draft_logits = torch.randn(4, vocab, generator=gen, dtype=torch.float64)
    draft_logits[:, head:] = -torch.inf
    target_logits = torch.randn(4, vocab, generator=gen, dtype=torch.float64) * 0.5
    return draft_logits.softmax(-1), target_logits.softmax(-1)


@pytest.mark.parametrize("div", sorted(RELEASE_NAMES))
def test_divergence_is_the_release_formula_with_its_smoothing(div):
    for seed in range(3):
        p, q = head_laws(seed)
        ours = fsd_divergence(p, q, div).squeeze(-1)
        torch.testing.assert_close(
            ours, release_divergence(p, q, RELEASE_NAMES[div]), rtol=1e-9, atol=1e-12
        )
        assert bool(torch.isfinite(ours).all())


def test_smoothing_lets_fsd_accept_where_the_drafter_head_is_zero():
    """Unsmoothed, KL(m || p) is infinite wherever p = 0 < q: FSD never accepts; the release's
    smoothing keeps it finite, so thresholds of the README's size accept again."""
    p, q = head_laws(7)
    threshold = float(release_divergence(p, q, "js_div").median())
    smoothed = make_sampler("fsd", threshold=threshold, test_law="processed")
    unsmoothed = make_sampler("fsd_unsmoothed", threshold=threshold, test_law="processed")
    accept = smoothed.acceptance_probability(p, q)
    expected = (release_divergence(p, q, "js_div") <= threshold).double()
    torch.testing.assert_close(accept, expected, rtol=0, atol=0)
    assert 0 < accept.sum().item() < len(accept)  # the threshold splits the rows
    assert unsmoothed.acceptance_probability(p, q).eq(0).all()
    assert bool(torch.isinf(fsd_divergence(p, q, "js", smoothing=0.0)).all())


def test_verify_smooths_over_the_whole_vocabulary():
    """The kernel drops the columns where p = q = 0 for the other rules; FSD's smoothing reads
    them, so verify must decide as the exact rows do on a row with many such columns."""
    p, q = head_laws(3, vocab=4096, head=8)
    q = q * (torch.arange(4096) < 32)  # a truncated verifier: 4,064 columns with p = q = 0
    q = q / q.sum(-1, keepdim=True)
    divergence = release_divergence(p, q, "js_div")
    on_support = release_divergence(p[:, :32], q[:, :32], "js_div")
    assert bool((divergence - on_support).abs().min() > 1e-6)  # the columns do move Div
    threshold = float((divergence[0] + on_support[0]) / 2)  # between the two: full V decides
    rule = make_sampler("fsd", threshold=threshold, test_law="processed")
    ids = p.argmax(-1, keepdim=True)[:1]  # [1, 1]
    out = rule.verify(ids, p[:1].unsqueeze(1), q[:1].unsqueeze(1).expand(1, 2, -1))
    assert int(out.num_accepted[0]) == int(divergence[0] <= threshold)
