"""Bugs the rehearsal found, one test each.

1. load_pair on a cluster node: a hub checkpoint missing from the cache (or at another
   revision, or gated) failed with transformers' generic "couldn't connect ... cached files"
   lines, naming neither the model, the revision nor the cache; now one line names all three,
   what the cache holds and the command that fixes it.
2. DeepSeek-R1's template opens `<think>` in the prompt, so a response cut off mid-reasoning
   carries no tag and its reasoning was scored (Qwen3's unfinished reasoning is removed); the
   lm-eval model now puts the opening tag back, so both families are stripped alike.
3. On a node without internet and without HF_HUB_OFFLINE=1, huggingface_hub retried every file
   of the pair 5 times (5 min 56 s for a 30 s run, measured with DNS failing at once); load_pair
   now probes the hub once and, when it cannot be reached, loads cached checkpoints offline or
   fails at once naming the missing one.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from helpers.tasks import ScriptedDecoder
from huggingface_hub import constants
from huggingface_hub.errors import GatedRepoError, LocalEntryNotFoundError
from lm_eval.api.instance import Instance

from cactus_bench.models import PairSpec, load_pair
from cactus_bench.models import hub as hub_module
from cactus_bench.models.hub import (
    HubModelUnavailable,
    explain_unavailable,
    go_offline_if_unreachable,
)
from cactus_bench.models.tiny import make_tiny_tokenizer
from cactus_bench.tasks.lm import CactusBenchLM, continues_thinking
from cactus_bench.tasks.paper_settings import strip_thinking

QWEN3 = Path(__file__).resolve().parents[2] / "shared" / "tokenizers" / "qwen3"
PAIR = PairSpec("q", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B")


# ---- 1. hub errors ------------------------------------------------------------------------------
@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    return hub


def test_missing_hub_model_fails_in_one_line_naming_the_fix(offline_cache):
    with pytest.raises(HubModelUnavailable) as caught:
        load_pair(PAIR, device="cpu")
    message = str(caught.value)
    assert "\n" not in message
    assert f"Qwen/Qwen3-8B is not in the Hugging Face cache {offline_cache}" in message
    assert "HF_HUB_OFFLINE=1" in message and "`hf download Qwen/Qwen3-8B`" in message
    assert "model.verifier" in message


def test_missing_revision_lists_what_the_cache_holds(offline_cache):
    repo = offline_cache / "models--Qwen--Qwen3-8B"
    commit = "a" * 40
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    pinned = PairSpec("q", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B", verifier_revision="b" * 40)
    with pytest.raises(HubModelUnavailable) as caught:
        load_pair(pinned, device="cpu")
    message = str(caught.value)
    assert f"revision {'b' * 40} of Qwen/Qwen3-8B is not in the cache" in message
    assert "refs main -> aaaaaaaaaaaa; snapshots aaaaaaaaaaaa" in message
    assert "model.verifier_revision" in message and "\n" not in message


def test_gated_and_unrelated_errors():
    response = httpx.Response(403, request=httpx.Request("GET", "https://huggingface.co/x"))
    gated = OSError("You are trying to access a gated repo.\nMake sure to ...")
    gated.__cause__ = GatedRepoError("403 gated", response=response)
    message = explain_unavailable("meta-llama/Llama-3.1-8B-Instruct", None, "verifier", gated)
    assert (
        "accept its license at https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct" in message
    )
    assert explain_unavailable("a/b", None, "drafter", OSError("disk full")) is None
    offline = OSError("couldn't connect")
    offline.__cause__ = LocalEntryNotFoundError("not cached")
    assert "is not in the Hugging Face cache" in explain_unavailable(
        "a/b", None, "drafter", offline
    )


def test_local_folder_errors_are_left_alone(tmp_path):
    empty = tmp_path / "model"
    empty.mkdir()
    with pytest.raises(Exception) as caught:  # transformers' own error for a local folder
        load_pair(PairSpec("local", str(empty), str(empty)), device="cpu")
    assert not isinstance(caught.value, HubModelUnavailable)


# ---- 2. reasoning opened in the prompt ----------------------------------------------------------
R1_PROMPT_END = "<｜Assistant｜><think>\n"


@pytest.mark.parametrize(
    ("context", "response", "paper", "strict"),
    [
        (
            f"<｜User｜>2+2?{R1_PROMPT_END}",
            "2 and 2 #### 9 then out of tokens",
            "2 and 2 #### 9 then out of tokens",
            "",
        ),
        (f"<｜User｜>2+2?{R1_PROMPT_END}", "reason #### 9</think>\n#### 4", "#### 4", "#### 4"),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", "#### 4", "#### 4", "#### 4"),
        ("<|im_start|>assistant\n", "<think>out of tokens #### 9", "out of tokens #### 9", ""),
        (
            "<|im_start|>assistant\n",
            "no reasoning #### 4",
            "no reasoning #### 4",
            "no reasoning #### 4",
        ),
    ],
)
def test_reasoning_opened_in_the_prompt_is_stripped_like_qwen3s(context, response, paper, strict):
    """Both template styles are scored alike under either filter (R1 opens the block in the
    prompt, Qwen3 in the response; the third case is Qwen3 with thinking off)."""
    tokenizer = make_tiny_tokenizer()
    lm = CactusBenchLM(
        ScriptedDecoder(tokenizer, lambda _: response), tokenizer, show_progress=False
    )
    request = Instance("generate_until", doc={}, arguments=(context, {"until": []}), idx=0)
    (returned,) = lm.generate_until([request])
    assert strip_thinking(returned) == paper
    assert strip_thinking(returned, "strict") == strict


def test_continues_thinking_only_for_an_open_block():
    assert continues_thinking("x<think>\n") == "<think>"
    assert continues_thinking("x<think>a</think>b") == ""
    assert continues_thinking("<think>a</think><think>b") == "<think>"
    assert continues_thinking("plain") == ""


@pytest.mark.skipif(not (QWEN3 / "tokenizer.json").is_file(), reason="../shared/tokenizers absent")
def test_real_qwen3_decode_keeps_the_think_tags_for_the_filter():
    """The engine decodes with skip_special_tokens=True: <think> must survive it (it is not a
    special token in Qwen3's tokenizer), or the reasoning text would reach the scorer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3))
    think, close, answer = 151667, 151668, tokenizer.encode("#### 4")
    ids = [think, *tokenizer.encode("2 + 2 = 4"), close, *tokenizer.encode("\n\n"), *answer]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert text.startswith("<think>") and strip_thinking(text) == "#### 4"


# ---- 3. an unreachable hub ----------------------------------------------------------------------
@pytest.fixture
def online_cache(tmp_path, monkeypatch):
    """An empty cache with huggingface_hub online; the environment is restored afterwards."""
    hub = tmp_path / "hub"
    hub.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return hub


def _cache_snapshot(hub: Path, repo: str) -> None:
    snapshot = hub / ("models--" + repo.replace("/", "--")) / "snapshots" / ("c" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("c" * 40)


def test_unreachable_hub_with_cached_models_goes_offline(online_cache, monkeypatch, capsys):
    _cache_snapshot(online_cache, "a/drafter")
    _cache_snapshot(online_cache, "a/verifier")
    monkeypatch.setattr(hub_module, "hub_reachable", lambda: False)
    go_offline_if_unreachable([("verifier", "a/verifier", None), ("drafter", "a/drafter", None)])
    assert constants.HF_HUB_OFFLINE is True and constants.is_offline_mode()
    assert (
        "cannot be reached; loading a/drafter, a/verifier from the cache" in capsys.readouterr().err
    )


def test_unreachable_hub_without_the_model_fails_at_once(online_cache, monkeypatch):
    _cache_snapshot(online_cache, "a/drafter")
    monkeypatch.setattr(hub_module, "hub_reachable", lambda: False)
    with pytest.raises(HubModelUnavailable, match="a/verifier is not in the Hugging Face cache"):
        go_offline_if_unreachable(
            [("drafter", "a/drafter", None), ("verifier", "a/verifier", None)]
        )
    assert constants.HF_HUB_OFFLINE is False  # nothing switched for a failed load


def test_reachable_or_offline_hub_changes_nothing(online_cache, monkeypatch):
    monkeypatch.setattr(hub_module, "hub_reachable", lambda: True)
    go_offline_if_unreachable([("verifier", "a/missing", None)])  # online: the hub will serve it
    assert constants.HF_HUB_OFFLINE is False
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_module, "hub_reachable", lambda: pytest.fail("probed while offline"))
    go_offline_if_unreachable([("verifier", "a/missing", None)])
