"""GPU memory for the vLLM engines (cactus_bench.vllm.memory, the backend's plan before loading)
and docs/gpu.md's table; no GPU and no vLLM needed (a fake card)."""

from __future__ import annotations

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
    # 7 more sequences of KV per engine (halved by tp 2), and the warm-up's 8 x 6 rows of V
    kv = (verifier.kv_bytes(16384, "bfloat16") * 2 + drafter.kv_bytes(16384, "bfloat16")) / 2
    warm_up = (8 * 6 - 1) * verifier.vocab * memory.SAMPLER_BYTES_PER_LOGIT
    assert verifier.vocab == 151_936
    grown = sum(batched.needs_gib.values()) - sum(one.needs_gib.values())
    assert grown == pytest.approx((7 * kv + warm_up + 7 * verifier.vocab * 24) / GIB, rel=1e-6)
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
    from test_run_backend_vllm import _conf

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
