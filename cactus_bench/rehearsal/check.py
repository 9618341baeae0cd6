"""What the rehearsal checks in a finished run: the prompt the chat template produced, and the
vocabulary facts of each pair (output sizes, the token_map), read from the hub cache."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cactus_bench.models.token_map import shared_token_ids
from cactus_bench.rehearsal.hub_models import hub_model

# (start, end) of a rendered GSM8K prompt per tokenizer kind: one BOS where the family has one,
# the user turn first, and the generation prompt last.
TEMPLATE_MARKS = {
    "qwen3": ("<|im_start|>user\n", "<|im_start|>assistant\n"),
    "deepseek_r1": ("<｜begin▁of▁sentence｜><｜User｜>", "<｜Assistant｜><think>\n"),
    "llama3": (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ),
    "gemma2": ("<bos><start_of_turn>user\n", "<start_of_turn>model\n"),
}
QWEN3_NO_THINKING = "<think>\n\n</think>\n\n"  # what enable_thinking=false appends


def template_problem(prompt: str, tokenizer_kind: str, enable_thinking: bool | None) -> str | None:
    """None when `prompt` (decoded with special tokens) is what the family's template renders,
    else what is wrong. enable_thinking: the pair's chat_template_kwargs value (Qwen3 only)."""
    start, end = TEMPLATE_MARKS[tokenizer_kind]
    if tokenizer_kind == "qwen3" and enable_thinking is False:
        end = end + QWEN3_NO_THINKING
    if not prompt.startswith(start):
        return f"prompt starts {prompt[: len(start) + 10]!r}, expected {start!r}"
    bos = start.split(">", 1)[0] + ">" if start.startswith(("<bos>", "<|begin", "<｜begin")) else ""
    if bos and prompt.startswith(bos + bos):
        return f"prompt starts with two BOS tokens {bos!r}"
    if not prompt.endswith(end):
        return f"prompt ends {prompt[-len(end) - 10 :]!r}, expected {end!r}"
    if tokenizer_kind == "qwen3" and enable_thinking and prompt.endswith(QWEN3_NO_THINKING):
        return "enable_thinking=true but the prompt closes the thinking block"
    return None


@dataclass(frozen=True)
class VocabFacts:
    drafter_vocab: int
    verifier_vocab: int
    shared_ids: int | None  # token_map size; None when both output the same number of logits


def snapshot_dir(hub: Path, repo_id: str, revision: str | None) -> Path:
    """The snapshot folder huggingface_hub resolves for `revision` (a commit, a ref, or main)."""
    repo = Path(hub) / ("models--" + repo_id.replace("/", "--"))
    ref = revision or "main"
    commit = ref if (repo / "snapshots" / ref).is_dir() else (repo / "refs" / ref).read_text()
    return repo / "snapshots" / commit


def vocab_facts(hub: Path, spec) -> VocabFacts:
    """Output sizes from the snapshots' config.json and load_pair's token_map rule applied to
    the snapshots' tokenizers (the same function load_pair calls)."""
    from transformers import AutoTokenizer  # lazy: keeps transformers out of rehearse.py's start

    folders = [
        snapshot_dir(hub, spec.drafter, spec.drafter_revision),
        snapshot_dir(hub, spec.verifier, spec.verifier_revision),
    ]
    sizes = [json.loads((f / "config.json").read_text())["vocab_size"] for f in folders]
    if sizes[0] == sizes[1]:
        return VocabFacts(sizes[0], sizes[1], None)
    tokenizers = [AutoTokenizer.from_pretrained(str(f)) for f in folders]
    token_map = shared_token_ids(*tokenizers, *sizes, spec.drafter, spec.verifier)
    return VocabFacts(sizes[0], sizes[1], int(token_map.numel()))


def tokenizer_kind(spec) -> str:
    return hub_model(spec.verifier).tokenizer
