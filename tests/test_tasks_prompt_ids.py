"""A chat prompt has one encoding (tasks/prompt_ids.py) wherever it is encoded: the run, the
frontier, the benches, the GPU check and the drafter's teacher. Checked with a tokenizer that
adds a BOS its template does not write (the benches once dropped it, and so timed another prompt
than a run decodes) and with the real tokenizers, where both rules give the same ids."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers.scripts import load_script
from helpers.tasks import ScriptedDecoder
from lm_eval.api.instance import Instance
from tokenizers import processors

from cactus_bench.bench import engine_arms, forward
from cactus_bench.frontier.contexts import encode_prompts
from cactus_bench.gpu_check.measurements import demo_prompts
from cactus_bench.models import smollm2
from cactus_bench.models.tiny import CHAT_TEMPLATE, make_tiny_tokenizer
from cactus_bench.tasks.lm import CactusBenchLM
from cactus_bench.tasks.prompt_ids import chat_prompt_ids
from cactus_bench.tasks.specs import DEMO_PROMPTS_PATH
from training.teacher import chat_ids

REPO = Path(__file__).resolve().parents[1]
QWEN3 = next(  # the real Qwen3 tokenizer, in shared/ beside the checkout or its worktree folder
    (
        folder / "shared" / "tokenizers" / "qwen3"
        for folder in REPO.parents
        if (folder / "shared" / "tokenizers" / "qwen3" / "tokenizer.json").exists()
    ),
    None,
)
THINKING_OFF = {"enable_thinking": False}
# The tiny ChatML template plus Qwen3's empty thinking block when thinking is off: a call site
# that drops the run's template variables encodes other ids.
TEMPLATE = CHAT_TEMPLATE + (
    "{% if add_generation_prompt and enable_thinking is defined and enable_thinking is false %}"
    "<think>\n\n</think>\n\n{% endif %}"
)
# Files that call `apply_chat_template` for something else than encoding a prompt, and why.
RENDERS_ELSEWHERE = {
    "cactus_bench/tasks/prompt_ids.py": "the one prompt encoding",
    "cactus_bench/tasks/lm.py": "lm-eval's hook; the text goes through rendered_prompt_ids",
    "cactus_bench/tasks/stop_set.py": "reads the template's turn closer, encodes no prompt",
}


@pytest.fixture(scope="module")
def bos_tokenizer():
    """The tiny tokenizer with a BOS `<s>` that its post-processor adds and its chat template
    does not write (as Llama 2's and Mistral's tokenizers do)."""
    tokenizer = make_tiny_tokenizer()
    tokenizer.add_special_tokens({"bos_token": "<s>"})
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.bos_token_id)]
    )
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def run_prompt_ids(tokenizer, text: str, chat_kwargs: dict) -> list[int]:
    """The ids a run decodes for `text`: the lm-eval model renders the user turn, then a request
    goes through generate_until to the decoder."""
    decoder = ScriptedDecoder(tokenizer, lambda _: "")
    lm = CactusBenchLM(decoder, tokenizer, chat_template_kwargs=chat_kwargs, show_progress=False)
    context = lm.apply_chat_template([{"role": "user", "content": text}])
    request = Instance("generate_until", doc={}, arguments=(context, {"until": []}), idx=0)
    lm.generate_until([request])
    return lm.records[0].prompt_ids


def bench_vllm_prompt_ids(tokenizer, count: int) -> list[list[int]]:
    return load_script("bench_vllm").prompt_ids(tokenizer, count)


def test_bos_is_added_once_whether_or_not_the_template_writes_it(bos_tokenizer):
    bos = bos_tokenizer.bos_token_id
    ids = chat_prompt_ids(bos_tokenizer, "hi", {})
    assert ids[0] == bos and ids.count(bos) == 1  # the post-processor's, the template has none
    turn = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert bos_tokenizer.decode(ids[1:]) == turn
    bos_tokenizer.chat_template = "{{ bos_token }}" + TEMPLATE
    try:
        written = chat_prompt_ids(bos_tokenizer, "hi", {})
    finally:
        bos_tokenizer.chat_template = TEMPLATE
    assert written == ids  # the template's BOS, and no second one from the post-processor


def test_every_call_site_encodes_the_ids_a_run_decodes(bos_tokenizer):
    tokenizer, bos = bos_tokenizer, bos_tokenizer.bos_token_id
    question = engine_arms.QUESTIONS[0]
    # call sites that pass the run's template variables
    expected = run_prompt_ids(tokenizer, question, THINKING_OFF)
    assert expected[0] == bos and expected.count(bos) == 1
    assert expected != run_prompt_ids(tokenizer, question, {})  # the variables change the ids
    assert chat_prompt_ids(tokenizer, question, THINKING_OFF) == expected
    assert encode_prompts([question], tokenizer, THINKING_OFF) == [expected]  # the frontier
    assert engine_arms.encode_prompts(tokenizer, THINKING_OFF, 1) == [expected]
    # call sites that pass none: the run's ids without them
    assert chat_ids(tokenizer, question) == run_prompt_ids(tokenizer, question, {})  # teacher
    plain = run_prompt_ids(tokenizer, forward.PROMPT, {})
    assert forward.prompt_ids(tokenizer, len(plain)) == plain
    lines = DEMO_PROMPTS_PATH.read_text().splitlines()[:2]
    demo = [run_prompt_ids(tokenizer, json.loads(line)["prompt"], {}) for line in lines]
    assert demo_prompts(tokenizer, 2) == demo  # the GPU check
    assert bench_vllm_prompt_ids(tokenizer, 2) == demo


def real_tokenizers() -> list:
    paths = [QWEN3] if QWEN3 else []
    paths += [smollm2.smollm2_dir()] if smollm2.is_prepared() else []
    return [pytest.param(path, id=path.name) for path in paths]


@pytest.mark.parametrize("path", real_tokenizers())
def test_real_tokenizers_get_the_ids_the_benches_encoded_before(path):
    """Qwen3's and the embedded SmolLM2's tokenizers add no special tokens: the ids are those of
    the rendered text without them, as the benches, GPU check and teacher encoded it before."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    for line in DEMO_PROMPTS_PATH.read_text().splitlines()[:3]:
        text = json.loads(line)["prompt"]
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        before = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert chat_prompt_ids(tokenizer, text, {}) == before
        assert run_prompt_ids(tokenizer, text, {}) == before


def test_no_other_file_renders_a_chat_prompt():
    """A new place that renders and encodes a prompt itself would bring back a second BOS rule."""
    files = [*(REPO / "cactus_bench").rglob("*.py"), *(REPO / "scripts").glob("*.py")]
    rendering = {
        path.relative_to(REPO).as_posix()
        for path in files
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "apply_chat_template"
    }
    assert rendering == set(RENDERS_ELSEWHERE)
