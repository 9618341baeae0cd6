"""The rehearsal's hub cache: real config fields, tokenizer stand-ins, the layout huggingface_hub
resolves offline, load_pair on it (V = 151,936 / 152,064 and the DeepSeek token_map), and
(slow) `scripts/rehearse.py` end to end through run.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants, scan_cache_dir, try_to_load_from_cache

from cactus_bench.engine import SamplingParams, SpeculativeDecoder
from cactus_bench.models import PairSpec, load_pair
from cactus_bench.rehearsal import (
    HUB_MODELS,
    build_hub_cache,
    hub_pairs,
    pinned_revisions,
    repo_folder,
)
from cactus_bench.rehearsal.check import template_problem, vocab_facts
from cactus_bench.rehearsal.tokenizers import write_tokenizer
from cactus_bench.samplers import make_sampler

REPO = Path(__file__).resolve().parents[1]
QWEN3 = REPO.parent / "shared" / "tokenizers" / "qwen3"
DATA = REPO.parent / "shared" / "data"
PINNED = "0123456789abcdef0123456789abcdef01234567"
R1_PAIR = PairSpec(
    "r1", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
)
pytestmark = pytest.mark.skipif(
    not (QWEN3 / "tokenizer.json").is_file(),
    reason="../shared/tokenizers/qwen3 is absent: the rehearsal builds on the real Qwen3 tokenizer",
)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    from transformers import AutoTokenizer

    loaded = {}
    for kind in ("qwen3", "deepseek_r1", "llama3", "gemma2"):
        folder = tmp_path_factory.mktemp(kind)
        write_tokenizer(kind, folder, QWEN3)
        loaded[kind] = AutoTokenizer.from_pretrained(str(folder))
    return loaded


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A cache with Qwen3-0.6B at main, at the tag v1 and at a pinned commit."""
    revisions = {"Qwen/Qwen3-0.6B": [None, "v1", PINNED]}
    return build_hub_cache(tmp_path_factory.mktemp("home"), revisions, QWEN3)


@pytest.fixture
def offline_r1_hub(tmp_path, monkeypatch):
    """The DeepSeek pair's cache; huggingface_hub (and transformers through it) reading only
    it, as with HF_HUB_OFFLINE=1."""
    hub = build_hub_cache(tmp_path, {R1_PAIR.drafter: [None], R1_PAIR.verifier: [None]}, QWEN3)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return hub


# ---- specs and tokenizers -----------------------------------------------------------------------
def test_specs_keep_the_real_architecture_fields():
    sizes = {repo: (m.config["architectures"][0], m.vocab_size) for repo, m in HUB_MODELS.items()}
    for name in ("0.6B", "1.7B", "8B", "14B", "32B"):
        assert sizes[f"Qwen/Qwen3-{name}"] == ("Qwen3ForCausalLM", 151936)
    assert sizes[R1_PAIR.drafter] == ("Qwen2ForCausalLM", 151936)
    assert sizes[R1_PAIR.verifier] == ("Qwen2ForCausalLM", 152064)
    assert sizes["meta-llama/Llama-3.1-8B-Instruct"] == ("LlamaForCausalLM", 128256)
    assert sizes["google/gemma-2-9b-it"] == ("Gemma2ForCausalLM", 256000)
    tied = {repo: m.config.get("tie_word_embeddings") for repo, m in HUB_MODELS.items()}
    assert tied["Qwen/Qwen3-0.6B"] is True and tied["Qwen/Qwen3-8B"] is False
    assert HUB_MODELS["Qwen/Qwen3-32B"].real_sizes["num_hidden_layers"] == 64
    assert HUB_MODELS["Qwen/Qwen3-32B"].config["num_hidden_layers"] == 2  # tiny
    # every hub id a model YAML names has a stand-in, so `make rehearse` covers every pair
    assert set(pinned_revisions(hub_pairs())) <= set(HUB_MODELS)
    assert {spec.name for spec in hub_pairs()} >= {"qwen3_8b", "deepseek_r1_7b", "gemma2_9b"}


@pytest.mark.slow  # builds three tokenizers from the 11 MB Qwen3 tokenizer.json
def test_deepseek_tokenizer_is_qwen_bpe_with_deepseek_specials(tokenizers):
    r1, qwen = tokenizers["deepseek_r1"], tokenizers["qwen3"]
    text = "Natalia sold clips to 48 of her friends.\n\nQuestion: 12 + 7 = ?"
    assert r1.encode(text) == [151646, *qwen.encode(text)]  # BOS from the post-processor
    ids = r1.convert_tokens_to_ids(["<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<think>"])
    assert ids == [151643, 151646, 151648] and len(r1) == 151665
    assert r1.eos_token_id == 151643
    # <think> is not special: decoding for the scorer keeps it, so it can be stripped
    assert r1.decode([151648, 9707, 151649], skip_special_tokens=True) == "<think>Hello</think>"
    prompt = r1.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert template_problem(prompt, "deepseek_r1", None) is None


@pytest.mark.slow
def test_llama3_and_gemma2_stand_ins_keep_the_real_special_ids(tokenizers):
    llama, gemma = tokenizers["llama3"], tokenizers["gemma2"]
    assert len(llama) == 128256 and llama.convert_tokens_to_ids("<|eot_id|>") == 128009
    ids = llama.encode("Hello world")
    assert ids[0] == 128000 and max(ids[1:]) < 128000 and ids.count(128000) == 1
    assert gemma.convert_tokens_to_ids(["<bos>", "<start_of_turn>", "<end_of_turn>"]) == [
        2,
        106,
        107,
    ]
    assert gemma.decode(gemma.encode("Hello world"), skip_special_tokens=True) == "Hello world"
    with pytest.raises(Exception, match="System role not supported"):
        gemma.apply_chat_template([{"role": "system", "content": "x"}], tokenize=False)
    for kind in ("llama3", "gemma2"):
        messages = [{"role": "user", "content": "Hi"}]
        prompt = tokenizers[kind].apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        assert template_problem(prompt, kind, None) is None
        assert template_problem(prompt.replace("Hi", "Hi", 1) + "x", kind, None) is not None


def test_template_check_sees_enable_thinking():
    from transformers import AutoTokenizer

    qwen = AutoTokenizer.from_pretrained(str(QWEN3))
    messages = [{"role": "user", "content": "Hi"}]
    on, off = (
        qwen.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, enable_thinking=flag
        )
        for flag in (True, False)
    )
    assert template_problem(on, "qwen3", True) is None
    assert template_problem(off, "qwen3", False) is None
    assert template_problem(off, "qwen3", True) is not None  # kwargs dropped -> caught
    assert template_problem(on, "qwen3", False) is not None


# ---- the cache layout ---------------------------------------------------------------------------
def test_cache_layout_is_what_huggingface_hub_resolves(hub):
    repo = "Qwen/Qwen3-0.6B"
    folder = hub / repo_folder(repo)
    main = (folder / "refs" / "main").read_text()
    assert len(main) == 40 and (folder / "refs" / "v1").read_text() == main
    assert sorted(p.name for p in (folder / "snapshots").iterdir()) == sorted([main, PINNED])
    for revision in (None, "main", "v1", main, PINNED):
        path = try_to_load_from_cache(repo, "config.json", cache_dir=hub, revision=revision)
        assert isinstance(path, str) and Path(path).is_file(), revision
    assert try_to_load_from_cache(repo, "config.json", cache_dir=hub, revision="v2") is None
    scanned = {info.repo_id: info for info in scan_cache_dir(hub).repos}
    assert {r.commit_hash for r in scanned[repo].revisions} == {main, PINNED}
    assert scanned[repo].refs.keys() == {"main", "v1"}
    config = json.loads((folder / "snapshots" / main / "config.json").read_text())
    assert config["vocab_size"] == 151936 and config["hidden_size"] == 64
    # rebuilding the same files keeps the same commit (the commit is a hash of the files)
    build_hub_cache(hub.parent, {repo: [None, "v1", PINNED]}, QWEN3, force=True)
    assert (folder / "refs" / "main").read_text() == main


@pytest.mark.slow  # two checkpoints of 152k x 64 rows, a 12-token decode at V = 152,064
def test_load_pair_from_the_cache_restricts_the_deepseek_pair(offline_r1_hub):
    facts = vocab_facts(offline_r1_hub, R1_PAIR)
    assert (facts.drafter_vocab, facts.verifier_vocab, facts.shared_ids) == (151936, 152064, 151665)
    pair = load_pair(R1_PAIR, device="cpu", dtype="float32")
    assert pair.drafter.lm_head.weight.shape[0] == 151936
    assert pair.verifier.lm_head.weight.shape[0] == 152064
    assert torch.equal(pair.token_map, torch.arange(151665))  # ids both tokenizers define
    decoder = SpeculativeDecoder(
        pair.drafter,
        pair.verifier,
        pair.tokenizer,
        make_sampler("cactus", delta=1.0),
        num_draft_tokens=3,
        sampling=SamplingParams(0.6, 0.95, 20),
        token_map=pair.token_map,
    )
    prompt = pair.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True, tokenize=False
    )
    record = decoder.generate(pair.tokenizer.encode(prompt, add_special_tokens=False), 12, seed=0)
    assert len(record.output_ids) == 12 and max(record.output_ids) < 151665
    assert sum(record.accepted_per_step) > 0  # a family's drafter agrees with its verifier


# ---- end to end through run.py ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "gsm8k" / "test.jsonl").is_file(), reason="../shared/data absent")
def test_rehearse_script_runs_pairs_through_the_cli(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "scripts/rehearse.py",
            "--home",
            str(tmp_path),
            "--pairs",
            "qwen3_8b,deepseek_r1_7b",
            "--max-new-tokens",
            "8",
            "--data-dir",
            str(DATA),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = {line.split("|")[1].strip(): line for line in done.stdout.splitlines() if "|" in line}
    assert "| yes | yes | 151,936 / 152,064 | 151,665 ids |" in table["deepseek_r1_7b"]
    assert "| yes | yes | 151,936 / 151,936 | - |" in table["qwen3_8b"]
    assert "| yes | yes |" in table["qwen3_8b_pinned_nothink"]
    assert "| yes | yes | 151,936 / 151,936 |" in table["qwen3_8b_batch4"]  # experiment=batch_gpu
    assert "4/4 pairs passed" in done.stdout


@pytest.mark.slow  # three runs of a V = 151,936 pair through the runner
def test_a_hub_update_of_main_does_not_reuse_the_cached_baseline(tmp_path, monkeypatch, capsys):
    """An unpinned revision resolves to whatever main is; after the hub updates main, a spec
    run must decode a fresh baseline, not compare itself with the old weights' timings."""
    from helpers.runs import tiny_conf

    from cactus_bench.run import run

    hub = build_hub_cache(tmp_path / "home", {"Qwen/Qwen3-0.6B": [None]}, QWEN3)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    qwen = [
        "model.name=q",
        "model.drafter=Qwen/Qwen3-0.6B",
        "model.verifier=Qwen/Qwen3-0.6B",
        "baseline=cached",
        "limit=1",
        "max_new_tokens=4",
        "threads=1",
    ]
    outcome = run(tiny_conf(tmp_path, *qwen, "sampler=verifier"))
    assert outcome.status == "ok"
    run(tiny_conf(tmp_path, *qwen, "sampler=sps"))
    assert "reusing the cached verifier-only decode" in capsys.readouterr().out
    repo = hub / repo_folder("Qwen/Qwen3-0.6B")
    old = (repo / "refs" / "main").read_text()
    (repo / "snapshots" / ("d" * 40)).symlink_to(repo / "snapshots" / old)  # main moves
    (repo / "refs" / "main").write_text("d" * 40)
    run(tiny_conf(tmp_path, *qwen, "sampler=tas"))
    assert "baseline: not cached for these prompts; decoding it once" in capsys.readouterr().out
