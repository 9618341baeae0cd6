"""The start-up conformance check (cactus_bench.vllm.conformance) on every source: the 0.33.0
and 0.34.0 wheels (read by `ast`), the vLLM installed here (imported, `inspect`), and a wheel
altered to rename a patched symbol, which must be refused in one line naming it.

The wheels come from the cache of tests/test_vllm_conformance.py (`pip download --no-deps`
once into ~/.cache/cactus_bench/wheels); without the registry their cases skip.
"""

from __future__ import annotations

import zipfile

import pytest
from helpers.vllm_sources import open_source, sources, wheel

from cactus_bench.vllm import conformance, lines

V2_WHEEL = "0.34.0"
RENAMED = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"


def reader_of(source):
    """The installed vLLM is read as the backend reads it at start (imported); a wheel by ast."""
    if source.label.startswith("installed"):
        return conformance.Imported()
    return conformance.SourceTree(source.read, source.names)


@pytest.mark.parametrize("param", sources(None))
def test_every_source_passes_the_start_check_of_its_line(param):
    source = open_source(param)
    assert conformance.mismatches(reader_of(source), source.line) == []
    conformance.require(reader_of(source), source.line, source.label)  # no refusal


@pytest.mark.vllm
def test_the_installed_vllm_is_checked_and_labelled():
    pytest.importorskip("vllm")
    label, line = conformance.require_installed()
    distribution, version = lines.installed()
    assert label == f"{distribution} {version}" and line == lines.installed_line()


def altered_wheel(tmp_path, old: str, new: str) -> zipfile.ZipFile:
    """A copy of 0.34.0's wheel (its Python members) with `old` renamed `new` in RENAMED."""
    original = zipfile.ZipFile(wheel(V2_WHEEL))
    copy = tmp_path / f"vllm-{V2_WHEEL}-altered.whl"
    with zipfile.ZipFile(copy, "w") as out:
        for name in original.namelist():
            if name.endswith(".py"):
                text = original.read(name).decode()
                out.writestr(name, text.replace(old, new) if name == RENAMED else text)
    return zipfile.ZipFile(copy)


def test_a_wheel_with_a_patched_symbol_renamed_is_refused_in_one_line(tmp_path):
    altered = altered_wheel(tmp_path, "def rejection_sample(", "def rejection_sample_v3(")
    tree = conformance.SourceTree(lambda p: altered.read(p).decode(), altered.namelist())
    with pytest.raises(lines.UnsupportedVllm) as error:
        conformance.require(tree, lines.V2, "vllm 0.34.0 (altered)")
    message = str(error.value)
    assert "\n" not in message
    assert "no vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils.rejection_sample" in message
    assert message.startswith("vllm 0.34.0 (altered) does not match what cactus_bench's v2 line")


def test_top_k_in_the_draft_sampler_is_refused(tmp_path):
    """vLLM applying top-k / top-p to drafts itself (an open pull request) would cut them
    twice: a gumbel_sample taking top_k is refused."""
    path = "vllm/v1/worker/gpu/sample/gumbel.py"
    original = zipfile.ZipFile(wheel(V2_WHEEL))
    head = "def gumbel_sample(\n    logits: torch.Tensor,  # [num_tokens, vocab_size]\n"
    text = original.read(path).decode().replace(head, head + "    top_k: torch.Tensor,\n")
    assert "top_k: torch.Tensor" in text
    names = [n for n in original.namelist() if n.endswith(".py")]
    tree = conformance.SourceTree(lambda p: text if p == path else original.read(p).decode(), names)
    found = conformance.mismatches(tree, lines.V2)
    assert found == [
        "vllm.v1.worker.gpu.sample.gumbel.gumbel_sample reads top_k/top_p "
        "(drafts would be cut twice)"
    ]
