"""GPU memory for the vLLM engines (cactus_bench.vllm.memory, the backend's plan before loading)
and docs/gpu.md's table; no GPU and no vLLM needed (a fake card)."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from cactus_bench.vllm import memory

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import gpu_memory_table  # noqa: E402

GIB = memory.GIB


@pytest.mark.parametrize(
    ("repo_id", "billions"),  # the model cards' parameter counts
    [
        ("Qwen/Qwen3-0.6B", 0.6),
        ("Qwen/Qwen3-8B", 8.2),
        ("Qwen/Qwen3-14B", 14.8),
        ("Qwen/Qwen3-32B", 32.8),
    ],
)
def test_parameter_counts_match_the_model_cards(repo_id, billions):
    size = gpu_memory_table.published_size(repo_id)
    assert size.params / 1e9 == pytest.approx(billions, rel=0.01)
    assert size.kv_elements_per_token == 2 * size_layers(repo_id) * 8 * 128  # GQA: 8 kv heads


def size_layers(repo_id: str) -> int:
    from cactus_bench.rehearsal.hub_models import hub_model

    return hub_model(repo_id).real_sizes["num_hidden_layers"]


def test_plan_splits_the_share_by_need_and_refuses_in_one_line():
    verifier = gpu_memory_table.published_size("Qwen/Qwen3-14B")
    drafter = gpu_memory_table.published_size("Qwen/Qwen3-0.6B")
    args = {"dtype": "bfloat16", "max_model_len": 16384, "share": 0.85}
    plan = memory.plan_memory(
        verifier, drafter, engines=("speculative", "baseline"), tp=1, card_bytes=141 * GIB, **args
    )
    assert sum(plan.utilization.values()) == pytest.approx(0.85, abs=1e-3)
    assert plan.utilization["speculative"] > plan.utilization["baseline"]
    # 14B in bf16 is 27.5 GiB of weights: half of 0.85 of a 40 GiB card cannot hold it; both
    # engines at tp 1 on an 80 GB card (66.9 GiB) fit its share (68) but not the margin
    with pytest.raises(ValueError, match="tensor_parallel_size") as error:
        memory.plan_memory(
            verifier,
            drafter,
            engines=("speculative", "baseline"),
            tp=1,
            card_bytes=40 * GIB,
            **args,
        )
    assert "\n" not in str(error.value) and "GiB per GPU" in str(error.value)
    with pytest.raises(ValueError, match="margin"):
        memory.plan_memory(
            verifier,
            drafter,
            engines=("speculative", "baseline"),
            tp=1,
            card_bytes=80 * GIB,
            **args,
        )
    sharded = memory.plan_memory(
        verifier, drafter, engines=("speculative", "baseline"), tp=4, card_bytes=40 * GIB, **args
    )
    assert sharded.needs_gib["baseline"] < 10


def test_plan_counts_the_batch_the_sampler_warm_up_and_keeps_a_margin():
    verifier = gpu_memory_table.published_size("Qwen/Qwen3-14B")
    drafter = gpu_memory_table.published_size("Qwen/Qwen3-0.6B")
    args = {"dtype": "bfloat16", "max_model_len": 16384, "share": 0.85, "tp": 2}
    both = ("speculative", "baseline")
    one = memory.plan_memory(verifier, drafter, engines=both, card_bytes=80 * GIB, **args)
    batched = memory.plan_memory(
        verifier,
        drafter,
        engines=both,
        card_bytes=141 * GIB,
        batch=8,
        draft_tokens=5,
        **args,
    )
    # 7 more sequences of KV per engine (halved by tp 2), the warm-up's 8 x 6 rows of V, and
    # the rule's: the bridge's rows (8 x 6 of V, capped at 1 GiB, against 1 x 1) and the
    # drafter law's 8 rows against 1
    kv = (verifier.kv_bytes(16384, "bfloat16") * 2 + drafter.kv_bytes(16384, "bfloat16")) / 2
    warm_up = (8 * 6 - 1) * verifier.vocab * memory.SAMPLER_BYTES_PER_LOGIT
    per_logit = memory.DEFAULT_BRIDGE_BYTES_PER_LOGIT  # no rule named: the largest
    assert 6 * verifier.vocab * per_logit < GIB < 8 * 6 * verifier.vocab * per_logit
    bridge = GIB - verifier.vocab * per_logit  # capped at batch 8; one row at batch 1, m = 0
    law = 7 * verifier.vocab * memory.DRAFT_LAW_BYTES_PER_LOGIT
    assert verifier.vocab == 151_936
    grown = sum(batched.needs_gib.values()) - sum(one.needs_gib.values())
    expected = 7 * kv + warm_up + 7 * verifier.vocab * 24 + bridge + law
    assert grown == pytest.approx(expected / GIB, rel=1e-6)
    # the margin: a plan that fits the share but not the share less FIT_MARGIN is refused
    need = sum(one.needs_gib.values())
    tight = int(need / 0.85 / (1 - memory.FIT_MARGIN / 2) * GIB)
    with pytest.raises(ValueError, match="margin") as error:
        memory.plan_memory(verifier, drafter, engines=both, card_bytes=tight, **args)
    assert "\n" not in str(error.value) and "batch 1 on" in str(error.value)
    roomy = int(need / 0.85 / (1 - 2 * memory.FIT_MARGIN) * GIB)
    memory.plan_memory(verifier, drafter, engines=both, card_bytes=roomy, **args)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        memory.plan_memory(verifier, drafter, engines=both, card_bytes=roomy, batch=0, **args)


def test_docs_carry_the_scripts_table():
    out = subprocess.run(
        [sys.executable, "scripts/gpu_memory_table.py"], cwd=REPO, capture_output=True, text=True
    )
    assert out.returncode == 0 and out.stdout.strip() in (REPO / "docs/gpu.md").read_text()


def test_backend_checks_gpus_and_fit_before_loading(tmp_path, monkeypatch):
    from helpers.runs import compose_tiny as _conf

    from cactus_bench.run import ConfigError, build_identity
    from cactus_bench.run.backends import vllm as backend

    sizes = {
        "V": gpu_memory_table.published_size("Qwen/Qwen3-14B"),
        "D": gpu_memory_table.published_size("Qwen/Qwen3-0.6B"),
    }
    monkeypatch.setattr(backend, "model_size_of", lambda path, revision: sizes[path])
    identity = build_identity(
        _conf(tmp_path, "backend=vllm", "sampler=cactus", "model.dtype=bfloat16")
    )[0]
    monkeypatch.setattr(backend, "cuda_card", lambda: (40 * GIB, 1))
    with pytest.raises(ConfigError, match="needs .* GiB per GPU"):
        backend.engine_options(identity, "V", "D")
    identity = build_identity(
        _conf(
            tmp_path,
            "backend=vllm",
            "sampler=cactus",
            "model.dtype=bfloat16",
            "backend.tensor_parallel_size=4",
        )
    )[0]
    with pytest.raises(ConfigError, match="tensor_parallel_size=4 but this job sees 1 GPU"):
        backend.engine_options(identity, "V", "D")
    monkeypatch.setattr(backend, "cuda_card", lambda: (40 * GIB, 4))
    options = backend.engine_options(identity, "V", "D")
    assert options[True].max_model_len == 16384  # the paper's, under Qwen3's 40,960
    assert options[True].gpu_memory_utilization + options[False].gpu_memory_utilization == (
        pytest.approx(0.85, abs=1e-3)
    )
    monkeypatch.setattr(backend, "cuda_card", lambda: None)  # vLLM's CPU platform: no plan
    assert backend.engine_options(identity, "V", "D")[True].gpu_memory_utilization == 0.425
    # the batch is vLLM's max_num_seqs, for both arms, and the plan sizes the KV cache for it
    monkeypatch.setattr(backend, "cuda_card", lambda: (80 * GIB, 1))
    batched = build_identity(
        _conf(tmp_path, "backend=vllm", "sampler=cactus", "model.dtype=bfloat16", "batch=64")
    )[0]
    with pytest.raises(ConfigError, match="batch 64 on 1 GPU"):
        backend.engine_options(batched, "V", "D")
    monkeypatch.setattr(backend, "cuda_card", lambda: None)
    assert {o.batch for o in backend.engine_options(batched, "V", "D").values()} == {64}


# ---- the rule's working sets, measured -----------------------------------------------------------
def peak_bytes(call) -> int:
    """The peak of CPU memory allocated by torch ops during `call()` (the profiler's memory
    events, in time order), beyond what was allocated before it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def bridge_peak(rule, batch: int, m: int, vocab: int = 2048) -> int:
    """Peak bytes of one V2 step of `batch` requests, m drafts each (one chunk)."""
    import torch
    from helpers.vllm_fakes import v2_layout

    from cactus_bench.vllm import bridge_v2

    g = torch.Generator().manual_seed(0)
    draft = torch.softmax(torch.randn(m, vocab, generator=g), -1)
    target = torch.softmax(torch.randn(m + 1, vocab, generator=g), -1)
    drafts = torch.stack([torch.multinomial(draft[j], batch, True, generator=g) for j in range(m)])
    args, per_state = v2_layout(draft, target, drafts.T.contiguous())
    return peak_bytes(lambda: bridge_v2.rejection_sample_v2(*args, *per_state, rule=rule))


def every_rule_name() -> list[str]:
    from cactus_bench.samplers import SAMPLERS

    return sorted(SAMPLERS)


@pytest.mark.parametrize("name", every_rule_name())
def test_the_bridges_bytes_per_logit_are_measured(name):
    """Peak allocation through the V2 bridge at m = 1 and m = 3 (4 requests, V = 2,048) gives
    each rule's per-row a and per-draft-slot b; the plan's constant must hold the largest
    per-logit value over m >= 1, max(a + b / 2, a + b), within 8 bytes and 15 %."""
    from cactus_bench.samplers import make_sampler

    rule = make_sampler(name)
    if getattr(rule, "reads_unscaled", False):
        rule = make_sampler(name, test_law="processed")
    batch, vocab = 4, 2048
    one, three = (bridge_peak(rule, batch, m) / (batch * vocab) for m in (1, 3))
    b = (three - 2 * one) / 1  # one = 2a + b, three = 4a + 3b
    a = (one - b) / 2
    worst = max(a + b / 2, a + b)
    constant = memory.bridge_bytes_per_logit(name)
    assert worst <= constant, (name, a, b)
    if name in memory.BRIDGE_BYTES_PER_LOGIT:  # measured, not assumed
        assert constant <= worst * 1.15 + 8, (name, a, b)


def test_the_bridge_grows_linearly_with_the_batch_and_the_law_is_measured():
    import torch

    from cactus_bench.samplers import make_sampler
    from cactus_bench.vllm.v2_law import processed_law_logits

    rule = make_sampler("sps")
    four, eight = bridge_peak(rule, 4, 3), bridge_peak(rule, 8, 3)
    assert eight == pytest.approx(2 * four, rel=0.02)
    per_logit = []
    for rows in (16, 32):
        inputs = (
            torch.randn(rows, 4096),  # logits
            torch.arange(rows),  # request states
            torch.ones(rows),  # temperature
            torch.full((rows,), 20),  # top-k
            torch.full((rows,), 0.9),  # top-p
        )
        peak = peak_bytes(functools.partial(processed_law_logits, *inputs))
        per_logit.append(peak / (rows * 4096))
    assert per_logit[1] == pytest.approx(per_logit[0], rel=0.02)
    assert per_logit[1] <= memory.DRAFT_LAW_BYTES_PER_LOGIT <= per_logit[1] * 1.15 + 8


def test_a_capped_step_stays_under_its_cap():
    """12 requests of m = 3 at V = 2,048 with a cap of 3 requests' rows: the peak is that of
    3 requests (chunks), not of 12, and the whole step's is 4x larger."""
    from cactus_bench.samplers import make_sampler
    from cactus_bench.vllm import working_set

    rule = make_sampler("fsd", test_law="processed")
    per_request = 4 * 2048 * memory.bridge_bytes_per_logit("fsd")
    whole = bridge_peak(rule, 12, 3)
    previous = working_set.CAP_BYTES
    working_set.CAP_BYTES = 3 * per_request
    try:
        capped = bridge_peak(rule, 12, 3)
    finally:
        working_set.CAP_BYTES = previous
    assert capped <= 3 * per_request + 12 * 4 * 2048 * 4  # + the step's own [L] outputs
    assert whole > 3 * capped


def test_the_8b_pair_at_batch_64_and_m_20_fits_an_80_gb_card_or_says_why():
    verifier = gpu_memory_table.published_size("Qwen/Qwen3-8B")
    drafter = gpu_memory_table.published_size("Qwen/Qwen3-0.6B")
    args = {"engines": ("speculative",), "dtype": "bfloat16", "tp": 1, "share": 0.85}
    card = 81_559 << 20  # an 80 GB card as nvidia-smi reports it
    batched = {"batch": 64, "draft_tokens": 20, "card_bytes": card}
    for rule in ("sps", "mentored", None):
        plan = memory.plan_memory(
            verifier, drafter, max_model_len=2048, rule=rule, **batched, **args
        )
        assert plan.utilization == {"speculative": 0.85}
        parts = memory.engine_parts_gib(
            [verifier, drafter],
            dtype="bfloat16",
            max_model_len=2048,
            tp=1,
            batch=64,
            draft_tokens=20,
            rule=rule,
        )
        assert 1.0 < parts["rule"] < 2.0  # the capped bridge and the drafter law's 0.29 GiB
    with pytest.raises(ValueError, match="speculative engine's KV cache, 256.0") as error:
        memory.plan_memory(verifier, drafter, max_model_len=16384, rule="sps", **batched, **args)
    assert "\n" not in str(error.value)
