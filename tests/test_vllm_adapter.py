"""The vLLM adapter: layout bridge, rule laws, patching, env parsing, backend helpers, runner path.

Everything above the GPU section runs on CPU without vLLM (fake vLLM objects where needed).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from cactus_bench.samplers import make_sampler
from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import decoder as vb

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def _metadata(temperature=None, generators=None):
    """A stand-in for vLLM's SamplingMetadata (the fields rejection_sample reads)."""
    if temperature is None:
        return SimpleNamespace(
            all_greedy=False, all_random=True, temperature=None, generators=generators or {}
        )
    t = torch.tensor(temperature, dtype=torch.float32)
    return SimpleNamespace(
        all_greedy=bool((t == 0).all()),
        all_random=bool((t > 0).all()),
        temperature=t,
        generators=generators or {},
    )


def _ragged(counts, vocab=6, seed=0):
    """Random drafter/verifier rows for requests with `counts` drafts (flattened like vLLM)."""
    g = torch.Generator().manual_seed(seed)
    n = sum(counts)
    draft_probs = torch.softmax(torch.randn(n, vocab, generator=g), -1)
    target_probs = torch.softmax(torch.randn(n, vocab, generator=g), -1)
    ids = torch.multinomial(draft_probs, 1, generator=g).view(-1) if n else torch.zeros(0).long()
    cu = torch.tensor(counts).cumsum(0)
    bonus = torch.arange(len(counts)).view(-1, 1) % vocab
    return ids, cu, draft_probs, target_probs, bonus


# ---- layout (runner V1) -------------------------------------------------------------------------
def test_v1_full_acceptance_places_drafts_bonus_and_placeholders():
    counts = [3, 0, 2, 1]
    ids, cu, q, _, bonus = _ragged(counts)
    out = va.rejection_sample_v1(
        ids, counts, 3, cu, q, q.clone(), bonus, _metadata(), rule=make_sampler("sps")
    )  # target == drafter law: every draft is accepted
    assert out.dtype == torch.int32 and out.shape == (4, 4)
    starts = [0, 3, 3, 5]
    for b, n in enumerate(counts):
        expected = ids[starts[b] : starts[b] + n].tolist() + [int(bonus[b])]
        assert out[b].tolist() == expected + [va.PLACEHOLDER_TOKEN_ID] * (3 - n)


def test_v1_rejection_recovers_and_pads():
    counts = [3]
    ids = torch.tensor([1, 2, 3])
    q = torch.full((3, 5), 0.2)
    target = q.clone()
    target[1] = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0])  # draft 2 has no verifier mass
    out = va.rejection_sample_v1(
        ids,
        counts,
        4,
        torch.tensor([3]),
        q,
        target,
        torch.tensor([[4]]),
        _metadata(),
        rule=make_sampler("sps"),
    )
    assert out[0, 0] == 1 and out[0, 1] in (0, 1)  # recovered from max(target - q, 0)
    assert out[0, 2:].tolist() == [-1, -1, -1]


def test_v1_greedy_rows_follow_vllm_whatever_the_rule():
    counts = [2, 2]
    logits = torch.tensor([[0.0, 5.0, 1.0], [3.0, 0.0, 1.0], [0.0, 5.0, 1.0], [3.0, 0.0, 1.0]])
    ids = torch.tensor([1, 2, 1, 0])  # row 0: accept, reject (argmax 0); row 1: accept both
    out = va.rejection_sample_v1(
        ids,
        counts,
        2,
        torch.tensor([2, 4]),
        None,
        logits,
        torch.tensor([[2], [2]]),
        _metadata([0.0, 0.0]),
        rule=make_sampler("cactus", delta=1.0),
    )
    assert out.tolist() == [[1, 0, -1], [1, 0, 2]]


def test_no_draft_probs_needs_a_drafter_free_rule():
    counts = [2]
    ids, cu, _, p, bonus = _ragged(counts)
    with pytest.raises(ValueError, match='draft_sample_method="probabilistic"') as error:
        va.rejection_sample_v1(
            ids, counts, 2, cu, None, p, bonus, _metadata(), rule=make_sampler("cactus", delta=0.5)
        )
    assert "\n" not in str(error.value)
    out = va.rejection_sample_v1(
        ids, counts, 2, cu, None, p, bonus, _metadata(), rule=make_sampler("tas", threshold=0.09)
    )
    assert out.shape == (1, 3) and (out[0, 0] >= 0)


def test_v1_equals_the_sampler_on_padded_tensors_for_one_generator():
    counts = [4]
    ids, cu, q, p, bonus = _ragged(counts, vocab=7, seed=3)
    rule = make_sampler("cactus", delta=0.5)
    for seed in range(20):
        gen = torch.Generator().manual_seed(seed)
        out = va.rejection_sample_v1(
            ids, counts, 5, cu, q, p, bonus, _metadata(generators={0: gen}), rule=rule
        )
        direct = rule.verify(
            ids.view(1, 4),
            q.view(1, 4, 7),
            torch.cat([p, torch.nn.functional.one_hot(bonus.view(-1), 7).float()]).view(1, 5, 7),
            torch.Generator().manual_seed(seed),
        )
        k = int(direct.num_accepted[0])
        assert out[0, : k + 1].tolist() == direct.token_ids[0, : k + 1].tolist()
        assert (out[0, k + 1 :] == -1).all()


def test_cactus_at_delta_zero_is_sps_through_the_bridge():
    counts = [3, 1, 0, 2]
    ids, cu, q, p, bonus = _ragged(counts, vocab=8, seed=5)
    for seed in range(10):
        outs = []
        for rule in (make_sampler("sps"), make_sampler("cactus", delta=0.0)):
            gens = {b: torch.Generator().manual_seed(seed * 10 + b) for b in range(4)}
            outs.append(
                va.rejection_sample_v1(
                    ids, counts, 3, cu, q, p, bonus, _metadata(generators=gens), rule=rule
                )
            )
        assert torch.equal(outs[0], outs[1])


def _chi2(tokens: torch.Tensor, law: torch.Tensor) -> float:
    observed = torch.bincount(tokens, minlength=law.numel()).double()
    expected = law.double() * tokens.numel()
    return float(((observed - expected) ** 2 / expected).sum())


def test_sps_through_the_bridge_emits_the_verifier_law():
    """First emitted token ~ verifier law (chi-square, df 4, critical 5e-5 level ~ 25.7)."""
    vocab, n_req = 5, 6000
    g = torch.Generator().manual_seed(11)
    drafter = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
    verifier = torch.tensor([0.1, 0.15, 0.2, 0.25, 0.3])
    ids = torch.multinomial(drafter, n_req, replacement=True, generator=g)
    counts = [1] * n_req
    torch.manual_seed(12)
    out = va.rejection_sample_v1(
        ids,
        counts,
        1,
        torch.arange(1, n_req + 1),
        drafter.expand(n_req, vocab).contiguous(),
        verifier.expand(n_req, vocab).contiguous(),
        torch.multinomial(verifier, n_req, replacement=True, generator=g).view(-1, 1),
        _metadata(),
        rule=make_sampler("sps"),
    )
    first = out[:, 0].long()
    assert _chi2(first, verifier) < 25.7
    assert _chi2(first, drafter) > 200  # the test can fail: the drafter's law is far off


# ---- layout (runner V2) -------------------------------------------------------------------------
def test_v2_layout_state_rows_placeholders_and_num_sampled():
    vocab, k, temp = 6, 3, 0.5
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(3, k, vocab, generator=g)  # drafter logits by request state row
    idx_mapping = torch.tensor([2, 0])  # request 0 lives in state row 2
    # request 0: 3 drafts; request 1: 1 draft then placeholders
    draft_sampled = torch.tensor([9, 4, 1, 2, 9, 5, -1, -1])
    cu = torch.tensor([0, 4, 8])
    target = torch.cat(
        [
            torch.cat([logits[2] / temp, torch.zeros(1, vocab)]),
            torch.cat([logits[0] / temp, torch.zeros(1, vocab)]),
        ]
    )  # verifier rows = drafter rows after temperature: every valid draft is accepted
    layout = (target, logits, draft_sampled, cu, torch.arange(8), idx_mapping, None, None)
    state = (torch.tensor([temp, 1.0, temp]), torch.tensor([7, 8, 9]), k)  # temperature, seed
    sampled, num_sampled = va.rejection_sample_v2(*layout, *state, rule=make_sampler("sps"))
    assert sampled.dtype == torch.int64 and num_sampled.dtype == torch.int32
    assert num_sampled.tolist() == [4, 2]
    assert sampled[0, :3].tolist() == [4, 1, 2] and sampled[1, 0] == 5
    assert sampled[1, 2:].tolist() == [-1, -1]
    again, _ = va.rejection_sample_v2(*layout, *state, rule=make_sampler("sps"))
    assert torch.equal(sampled, again)  # seeded by vLLM's request seed and position


def test_v2_refuses_vllm_own_lossy_methods():
    with pytest.raises(ValueError, match="rejection_sample_method"):
        va.rejection_sample_v2(
            torch.zeros(2, 3),
            None,
            torch.tensor([0, 1]),
            torch.tensor([0, 2]),
            torch.arange(2),
            torch.tensor([0]),
            None,
            None,
            torch.ones(1),
            torch.zeros(1),
            1,
            torch.ones(1),
            rule=make_sampler("sps"),
        )


# ---- patching and the plugin ---------------------------------------------------------------------
def _fake_module(first_arg: str):
    module = types.ModuleType("fake_vllm_rejection")
    namespace: dict = {}
    exec(f"def rejection_sample({first_arg}, *rest):\n    return 'original'", namespace)
    module.rejection_sample = namespace["rejection_sample"]
    return module


def test_install_rule_swaps_and_undoes():
    module = _fake_module("draft_token_ids")
    original = module.rejection_sample
    rule = make_sampler("sps")
    with va.install_rule(module, rule) as handle:
        assert module.rejection_sample is not original
        assert module.rejection_sample.cactus_rule is rule
        counts = [1]
        ids, cu, q, p, bonus = _ragged(counts)
        out = module.rejection_sample(ids, counts, 1, cu, q, p, bonus, _metadata())
        assert out.shape == (1, 2)
    assert module.rejection_sample is original
    handle.undo()  # idempotent
    assert module.rejection_sample is original
    with pytest.raises(ValueError, match="not supported"):
        va.install_rule(_fake_module("logits"), rule)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"delta": 1}', 'with a "name"'),
        ('{"name": "cactos"}', "unknown rule 'cactos'"),
        ('{"name": "cactus", "delta": -0.5}', "delta must be >= 0"),
        ('{"name": "sps", "delta": 1}', "does not take delta"),
    ],
)
def test_rule_env_rejects_bad_values_in_one_line(text, match):
    with pytest.raises(va.RuleSpecError, match=match) as error:
        va.rule_from_env({va.RULE_ENV: text})
    assert "\n" not in str(error.value) and va.RULE_ENV in str(error.value)


def test_rule_env_round_trip():
    rule = va.rule_from_env({va.RULE_ENV: vb.rule_spec("cactus", {"delta": 0.75, "k": None})})
    assert rule.name == "cactus" and rule.params() == {"delta": 0.75}
    assert va.rule_from_env({}) is None


def test_plugin_is_a_noop_without_the_variable(monkeypatch):
    monkeypatch.delenv(va.RULE_ENV, raising=False)
    assert va.register() == []


def test_plugin_with_the_variable_but_no_vllm_says_so(monkeypatch):
    if "vllm" in sys.modules or _has_vllm():
        pytest.skip("vllm is installed here")
    monkeypatch.setenv(va.RULE_ENV, '{"name": "sps"}')
    with pytest.raises(RuntimeError, match="no vLLM rejection sampler module"):
        va.register()


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def test_entry_point_is_declared():
    text = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert '"cactus_bench.vllm.acceptance:register"' in text


# ---- backend helpers -----------------------------------------------------------------------------
def test_llm_kwargs_for_both_arms():
    options = vb.VllmOptions(gpu_memory_utilization=0.4, enforce_eager=True)
    spec = vb.llm_kwargs("V", drafter_id="D", m=7, dtype="bfloat16", seed=3, options=options)
    assert spec["speculative_config"] == {
        "method": "draft_model",
        "model": "D",
        "num_speculative_tokens": 7,
        "draft_sample_method": "probabilistic",
    }
    assert spec["disable_log_stats"] is False and spec["gpu_memory_utilization"] == 0.4
    base = vb.llm_kwargs("V", drafter_id=None, m=7, dtype="bfloat16", seed=3, options=options)
    assert "speculative_config" not in base


def _metrics(drafts, draft_tokens, accepted, per_pos):
    return [
        SimpleNamespace(name="vllm:spec_decode_num_drafts", value=drafts),
        SimpleNamespace(name="vllm:spec_decode_num_draft_tokens", value=draft_tokens),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens", value=accepted),
        SimpleNamespace(name="vllm:spec_decode_num_accepted_tokens_per_pos", values=per_pos),
        SimpleNamespace(name="vllm:num_requests_running", value=1),
    ]


def test_counters_rebuild_the_exact_accept_multiset():
    before = vb.spec_counters(_metrics(10, 30, 12, [6, 4, 2]))
    # this request: steps accepting 3, 2, 0, 1 -> per_pos [3, 2, 1], accepted 6
    after = vb.spec_counters(_metrics(14, 42, 18, [9, 6, 3]))
    delta = vb.counter_delta(before, after)
    drafted, accepted, exact = vb.steps_from_counters(delta, 3)
    assert sorted(accepted) == [0, 1, 2, 3] and drafted == [3, 3, 3, 3] and exact
    from cactus_bench.results import summarise

    record = vb.VllmRequestRecord(
        prompt_ids=[1],
        output_ids=[5] * 10,
        num_draft_tokens=3,
        drafted_per_step=drafted,
        accepted_per_step=accepted,
        emitted_per_step=[a + 1 for a in accepted],
        total_time_s=1.0,
    )
    row = summarise([record])
    assert row["al"] == pytest.approx(1.5) and row["accept_rate_by_pos"] == [0.75, 0.5, 0.25]
    assert record.to_dict()["step_order"] == "sorted"


def test_counters_short_drafts_and_contradictions():
    drafted, accepted, exact = vb.steps_from_counters(
        {"drafts": 2, "draft_tokens": 4, "accepted": 3, "per_pos": [2, 1, 0]}, 3
    )
    assert sum(drafted) == 4 and sum(accepted) == 3 and not exact
    assert all(a <= d for a, d in zip(accepted, drafted, strict=True))
    with pytest.raises(ValueError, match="inconsistent"):
        vb.steps_from_counters(
            {"drafts": 1, "draft_tokens": 3, "accepted": 2, "per_pos": [1, 1, 1]}, 3
        )


def test_stop_reason_and_sampling_kwargs():
    assert vb.stop_reason("length", None) == "length"
    assert vb.stop_reason("stop", None) == "eos" and vb.stop_reason("stop", 151645) == "eos"
    assert vb.stop_reason("stop", "\n\n") == "stop"
    from cactus_bench.engine import SamplingParams

    kw = vb.sampling_kwargs(SamplingParams(0.6, 0.95, 20), 64, ["Q:"], 5, [2])
    assert kw == {
        "temperature": 0.6,
        "top_p": 0.95,
        "max_tokens": 64,
        "seed": 5,
        "top_k": 20,
        "stop": ["Q:"],
        "stop_token_ids": [2],
    }


# ---- GPU + vLLM (never run on the CPU machine) ------------------------------------------------
@pytest.mark.gpu
@pytest.mark.slow
def test_real_vllm_tiny_pair_runs_cactus(monkeypatch):
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from cactus_bench.engine import SamplingParams

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    llm = vb.build_llm(
        "Qwen/Qwen3-0.6B",
        rule=("cactus", {"delta": 0.75}),
        drafter_id="Qwen/Qwen3-0.6B",
        m=3,
        dtype="bfloat16",
        seed=0,
        options=vb.VllmOptions(gpu_memory_utilization=0.3, max_model_len=512),
    )
    dec = vb.VllmDecoder(
        llm, None, num_draft_tokens=3, sampler_name="cactus", sampling=SamplingParams(0.6, 0.95, 20)
    )
    record = dec.generate([9707, 11, 847, 829, 374], 32, seed=1)
    assert record.num_generated > 0 and record.num_steps > 0
    assert 0 <= record.accepted_length <= 3
