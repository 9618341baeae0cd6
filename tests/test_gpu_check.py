"""scripts/gpu_check.py (make gpu-check): one line and exit 2 without CUDA; its checks' logic on
the tiny pair on the CPU (a smoke run, --device cpu); the real run where a GPU is present."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cactus_bench.gpu_check import measurements as gpu_checks
from cactus_bench.gpu_check import suite as gpu_check

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_it_fails_in_one_line_naming_the_fix(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("gpu-check: ") and not out.exists()
    if torch.version.cuda is None:
        assert "CPU build" in line and "--index-url https://download.pytorch.org/whl/" in line


def test_cuda_problem_names_each_fix(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert "CPU build" in gpu_check.cuda_problem("cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "sees no GPU" in gpu_check.cuda_problem("cuda:0")
    assert gpu_check.cuda_problem("cpu") is None


def test_greedy_divergence_passes_only_at_a_tie(tiny_pair):
    drafter, verifier, tokenizer = tiny_pair

    class Scripted:
        def __init__(self, ids):
            self.ids = ids

        def generate(self, prompt, new_tokens, seed=None):
            from cactus_bench.engine import RequestRecord

            return RequestRecord(prompt_ids=prompt, output_ids=list(self.ids))

    prompt = tokenizer.encode("The answer is")
    args = (verifier, [prompt], 3, "float32", torch.device("cpu"))
    same = gpu_checks.compare_greedy(Scripted([5, 6, 7]), Scripted([5, 6, 7]), *args)
    assert same["identical"] == 1 and same["passed"]
    differ = gpu_checks.compare_greedy(Scripted([5, 6, 7]), Scripted([5, 9, 7]), *args)
    (divergence,) = differ["divergences"]
    assert divergence["position"] == 1 and divergence["top2_margin"] > 0
    assert differ["passed"] is (divergence["top2_margin"] <= gpu_checks.TIE_TOLERANCE["float32"])


def test_sampler_bench_rows():
    result = gpu_checks.sampler_bench(torch.device("cpu"), vocab=500, batches=(1,), m=3, repeats=1)
    assert {row["rule"] for row in result["rows"]} == set(gpu_checks.BENCH_RULES)
    assert all(row["fast_ms"] > 0 and row["naive_ms"] > 0 for row in result["rows"])


@pytest.mark.slow
def test_dry_run_writes_the_report(tmp_path):
    """The script end to end on the CPU (--dry; `make gpu-check DRY=1` in CI runs every check)."""
    out = tmp_path / "gpu_check.json"
    skip = "cuda_graphs,sampler_bench,qwen3_vocab,first_token_law,vllm"
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--dry", "--skip", skip, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert next(iter(report)) == "tree" and report["tree"].split()[0] in {"clean", "dirty"}
    assert list(report["checks"]) == list(gpu_check.CHECKS)
    # Skipped checks never pass: the report does not either, though nothing failed (exit 0).
    assert not report["passed"] and report["complete"]
    assert report["skipped"] == [name for name in gpu_check.CHECKS if name in skip.split(",")]
    ran = [c for name, c in report["checks"].items() if name not in report["skipped"]]
    assert all(check["status"] == "passed" and check["passed"] for check in ran)
    assert report["checks"]["greedy_float32"]["identical"] == 2  # exact on the CPU in fp32
    assert report["checks"]["greedy_float16"]["identical"] == 2
    assert len(report["checks"]["speedup"]["rows"]) == 4
    vllm = report["checks"]["vllm"]
    assert (vllm["status"], vllm["skipped"], vllm["passed"]) == ("skipped", "--skip", False)
    assert "gpu-check on CPU" in done.stdout
    (vllm_line,) = [line for line in done.stdout.splitlines() if line.strip().startswith("vllm")]
    assert vllm_line.split()[1] == "skipped"


def test_a_check_the_budget_left_out_is_incomplete_never_passed(tmp_path):
    """Budget 0: no check runs; each is marked incomplete, the run exits INCOMPLETE (3), not 0;
    --skip'ed checks are skipped, never passed."""
    import time

    results = dict(gpu_check.run_checks(None, {"speedup"}, -1.0, time.perf_counter()))
    assert list(results) == list(gpu_check.CHECKS) and list(results)[0] == "vllm"
    assert results["speedup"] == {"status": "skipped", "skipped": "--skip", "passed": False}
    left_out = [r for name, r in results.items() if name != "speedup"]
    assert all(r["status"] == "incomplete" and not r["passed"] for r in left_out)
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--dry", "--budget-s", "0", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    assert "INCOMPLETE" in done.stderr and "INCOMPLETE" in done.stdout
    report = json.loads(out.read_text())
    assert not report["passed"] and not report["complete"]


def test_first_token_law_check_can_fail():
    """The chi-square helper rejects a wrong law and accepts the right one (fixed seed)."""
    from cactus_bench.gpu_check import laws as gpu_checks_laws

    generator = torch.Generator().manual_seed(0)
    law = torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64)
    counts = torch.bincount(torch.multinomial(law, 3000, True, generator=generator), minlength=4)
    assert gpu_checks_laws.chi_square_p(counts.double(), law)[0] > 1e-3
    wrong = torch.tensor([0.4, 0.4, 0.2, 0.0], dtype=torch.float64)
    assert gpu_checks_laws.chi_square_p(counts.double(), wrong)[0] < 1e-3
    assert gpu_checks_laws.chi_square_p(counts.double(), torch.tensor([0.5, 0.5, 0, 0.0]))[0] == 0


def test_vllm_check_without_its_environment_fails_loudly(tmp_path):
    import argparse

    from cactus_bench.gpu_check import vllm_check as gpu_checks_vllm

    args = argparse.Namespace(vllm_python=tmp_path / "none", dry=True)
    result = gpu_checks_vllm.vllm_check(args, torch.device("cpu"))
    assert not result["passed"] and "make setup-vllm TARGET=cpu" in result["error"]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_check_passes_on_a_gpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert json.loads(out.read_text())["passed"]


def test_vllm_check_judges_the_workers_answer():
    """gpu_checks_vllm.judge on a made-up worker answer: passes, then fails on each fault."""
    import copy

    from cactus_bench.bench.greedy import GREEDY
    from cactus_bench.engine import AutoregressiveDecoder
    from cactus_bench.gpu_check import vllm_check as gpu_checks_vllm
    from cactus_bench.models import load_pair

    pair = load_pair("tiny_random", device="cpu", dtype="float32")
    prompts = [pair.tokenizer.encode("The answer is")]
    reference = AutoregressiveDecoder(pair.verifier, pair.tokenizer, sampling=GREEDY)
    greedy = [reference.generate(prompts[0], 4, seed=0).output_ids]
    generator = torch.Generator().manual_seed(0)
    draws = torch.multinomial(torch.tensor([0.6, 0.4]), 2000, True, generator=generator)
    counts = {"3": int((draws == 0).sum()), "7": int((draws == 1).sum())}
    after = [{"draft_law_calls": 40, "bridge_calls": 30}]
    answer = {
        "vllm_version": "0.32.0",
        "enforce_eager": True,
        "reports": [{"v1": True, "rule": "sps", "draft_law": True, "runner": "R"}],
        "reports_after": after,
        "v2_refusal": "VLLM_USE_V2_MODEL_RUNNER=1 asks for ...",
        "greedy": greedy,
        "self_draft": {"drafted": 1000, "accepted": 995},
        "sampler": {
            "vocab": 10,
            "draws": 2000,
            "q": {"3": 0.6, "7": 0.4},
            "counts": {"vllm": counts, "cactus_bench": counts},
            "ms_per_call": {"vllm": 2.0, "cactus_bench": 5.0},
        },
    }
    graphs = {
        "vllm_version": "0.32.0",
        "enforce_eager": False,
        "reports": [{"v1": True, "rule": "cactus", "draft_law": True, "runner": "R"}],
        "reports_after": after,
        "self_draft": {"drafted": 1000, "accepted": 999},
    }
    args = (pair, prompts, 4, "float32", torch.device("cpu"))

    def judge(sps=None, cactus=None):
        return gpu_checks_vllm.judge(
            {"sps_eager": sps or answer, "cactus_graphs": cactus or graphs}, *args
        )

    judged = judge()
    assert judged["passed"] and judged["sampler"]["time_ratio"] == 2.5
    assert judged["cactus_graphs_enforce_eager"] is False
    faults = [
        ("reports", [{"v1": False, "rule": "sps", "draft_law": True, "runner": "R"}]),
        ("reports", [{"v1": True, "rule": "cactus", "draft_law": True, "runner": "R"}]),
        ("v2_refusal", ""),
        # SpS self-drafting from vLLM's temperature-only law: ~0.9, below the floor
        ("self_draft", {"drafted": 1000, "accepted": 900}),
        ("reports_after", [{"draft_law_calls": 0, "bridge_calls": 30}]),
        ("reports_after", [{"draft_law_calls": 40, "bridge_calls": 0}]),
    ]
    for key, value in faults:
        assert not judge(sps={**answer, key: value})["passed"], key
    no_bridge = [{"draft_law_calls": 40, "bridge_calls": 0}]
    assert not judge(cactus={**graphs, "reports_after": no_bridge})["passed"]
    wrong = copy.deepcopy(answer)
    wrong["sampler"]["counts"]["vllm"] = {"3": 1000, "7": 1000}  # not q's 0.6 / 0.4
    assert not judge(sps=wrong)["passed"]
