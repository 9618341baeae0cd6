"""load_pair on local directories and embedded ids; the tokenizer-agreement and shared-id rules."""

from __future__ import annotations

import pytest
import torch

from cactus_bench.engine import SamplingParams, SpeculativeDecoder
from cactus_bench.models import PairSpec, load_pair, make_tiny_pair, shared_token_ids
from cactus_bench.models.loading import resolve_device, resolve_dtype
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")


def save(model, tokenizer, path):
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return str(path)


class FakeTokenizer:
    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)


def test_tiny_random_pair_loads_by_name(tiny_pair):
    pair = load_pair("tiny_random", device="cpu")
    assert pair.token_map is None and pair.chat_template_kwargs == {}
    assert pair.drafter_id == "embedded:tiny-random-drafter"
    ids = torch.tensor([[1, 2, 3]])
    expected = tiny_pair[1](input_ids=ids).logits
    assert torch.equal(pair.verifier(input_ids=ids).logits, expected)


def test_loading_from_local_directories_reproduces_the_models(tmp_path, tiny_pair):
    drafter, verifier, tokenizer = tiny_pair
    spec = PairSpec(
        "local",
        save(drafter, tokenizer, tmp_path / "d"),
        save(verifier, tokenizer, tmp_path / "v"),
        chat_template_kwargs={"enable_thinking": False},
    )
    pair = load_pair(spec, device="auto", dtype="float32")
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(pair.drafter(input_ids=ids).logits, drafter(input_ids=ids).logits)
        assert torch.allclose(pair.verifier(input_ids=ids).logits, verifier(input_ids=ids).logits)
    assert pair.token_map is None
    assert pair.chat_template_kwargs == {"enable_thinking": False}
    assert pair.tokenizer.decode(pair.tokenizer("the answer")["input_ids"]) == "the answer"


def test_embedding_size_mismatch_restricts_both_models_to_the_shared_ids(tmp_path):
    # DeepSeek-R1-Distill-Qwen: one tokenizer, 151,936 vs 152,064 output rows.
    drafter, _, tokenizer = make_tiny_pair(seed=1, vocab_size=None)
    _, verifier, _ = make_tiny_pair(seed=1, vocab_size=len(tokenizer) + 8)
    spec = PairSpec(
        "mismatch",
        save(drafter, tokenizer, tmp_path / "d"),
        save(verifier, tokenizer, tmp_path / "v"),
    )
    pair = load_pair(spec, device="cpu")
    assert torch.equal(pair.token_map, torch.arange(len(tokenizer)))
    # The engine then decodes over the shared ids only.
    decoder = SpeculativeDecoder(
        pair.drafter,
        pair.verifier,
        pair.tokenizer,
        make_sampler("sps"),
        num_draft_tokens=3,
        sampling=SamplingParams(temperature=0.6, top_p=0.95, top_k=20),
        token_map=pair.token_map,
    )
    record = decoder.generate([1, 2, 3], max_new_tokens=8, seed=0)
    assert 0 < len(record.output_ids) <= 8
    assert all(0 <= token < len(tokenizer) for token in record.output_ids)


def test_shared_ids_stop_below_both_output_sizes_and_at_defined_tokens():
    tokenizer = FakeTokenizer({"a": 0, "b": 1, "c": 2, "<pad>": 4})  # id 3 is undefined
    assert shared_token_ids(tokenizer, tokenizer, 6, 6) is None
    assert shared_token_ids(tokenizer, tokenizer, 6, 8).tolist() == [0, 1, 2, 4]
    assert shared_token_ids(tokenizer, tokenizer, 4, 9).tolist() == [0, 1, 2]


def test_tokenizer_disagreement_stops_with_one_line_naming_both_models():
    verifier_tok = FakeTokenizer({"a": 0, "b": 1, "c": 2})
    drafter_tok = FakeTokenizer({"a": 0, "c": 1, "b": 2})
    with pytest.raises(ValueError) as info:
        shared_token_ids(drafter_tok, verifier_tok, 3, 3, "org/small", "org/large")
    message = str(info.value)
    assert "\n" not in message and "org/small" in message and "org/large" in message
    assert "token id 1" in message
    # Ids that only the larger model can emit are not compared.
    extra = FakeTokenizer({"a": 0, "b": 1, "c": 2, "d": 3})
    assert shared_token_ids(extra, verifier_tok, 4, 3).tolist() == [0, 1, 2]


def test_tokenizer_disagreement_from_disk_fails_before_decoding(tmp_path, tiny_pair):
    drafter, verifier, tokenizer = tiny_pair
    _, _, other = make_tiny_pair(seed=0)
    other.add_tokens(["<extra_drafter_token>"])  # a new id the verifier's tokenizer lacks
    big_drafter, big_verifier, _ = make_tiny_pair(seed=0, vocab_size=len(tokenizer) + 4)
    spec = PairSpec(
        "bad",
        save(big_drafter, other, tmp_path / "d"),
        save(big_verifier, tokenizer, tmp_path / "v"),
    )
    with pytest.raises(ValueError, match=r"disagree on token id \d+") as info:
        load_pair(spec, device="cpu")
    assert str(tmp_path / "d") in str(info.value) and str(tmp_path / "v") in str(info.value)


def test_device_and_dtype_resolution():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("fp8", torch.device("cpu"))


def test_mixing_embedded_ids_with_hub_ids_is_refused():
    spec = PairSpec("mixed", "embedded:tiny-random-drafter", "Qwen/Qwen3-8B")
    with pytest.raises(ValueError, match="embedded models only pair as"):
        load_pair(spec, device="cpu")
    spec = PairSpec("typo", "embedded:nope", "embedded:nope-either")
    with pytest.raises(ValueError, match="unknown embedded model"):
        load_pair(spec, device="cpu")
