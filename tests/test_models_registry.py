"""The pair registry and its Hydra YAMLs (configs/model/*.yaml): names, fields, agreement."""

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from cactus_bench.models import PAIR_NAMES, PAIRS, PairSpec, get_pair_spec
from cactus_bench.run.conf import ModelConf

MODEL_CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "model"
EXPECTED = {
    "qwen3_8b": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"),
    "qwen3_14b": ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-14B"),
    "qwen3_32b": ("Qwen/Qwen3-1.7B", "Qwen/Qwen3-32B"),
    "gemma2_9b": ("google/gemma-2-2b-it", "google/gemma-2-9b-it"),
    "llama31_8b": ("meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    "deepseek_r1_7b": (
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
    ),
    "smollm2_135m": ("embedded:smollm2-135m-drafter", "embedded:smollm2-135m-instruct"),
    "tiny_random": ("embedded:tiny-random-drafter", "embedded:tiny-random-verifier"),
}


def test_registry_holds_the_papers_pairs_and_the_local_ones():
    assert set(PAIR_NAMES) == set(EXPECTED)
    for name, (drafter, verifier) in EXPECTED.items():
        spec = get_pair_spec(name)
        assert (spec.name, spec.drafter, spec.verifier) == (name, drafter, verifier)


def test_qwen3_pairs_turn_thinking_on_and_others_do_not():
    for name in PAIR_NAMES:
        thinking = PAIRS[name].chat_template_kwargs.get("enable_thinking")
        assert thinking is (True if name.startswith("qwen3") else None)


def test_unknown_pair_name_lists_the_valid_names_on_one_line():
    with pytest.raises(ValueError) as info:
        get_pair_spec("qwen3_9b")
    message = str(info.value)
    assert "\n" not in message
    assert "qwen3_9b" in message and all(name in message for name in PAIR_NAMES)


def test_pairspec_rejects_bad_fields():
    with pytest.raises(ValueError, match="dtype"):
        PairSpec("x", "a", "b", dtype="fp8")
    with pytest.raises(ValueError, match="max_context"):
        PairSpec("x", "a", "b", max_context=0)
    with pytest.raises(ValueError, match="drafter"):
        PairSpec("x", "", "b")


def test_one_yaml_per_pair_matching_the_registry():
    files = {path.stem: path for path in MODEL_CONFIGS.glob("*.yaml")}
    assert set(files) == set(PAIR_NAMES)
    for name, path in files.items():
        loaded = yaml.safe_load(path.read_text())
        assert loaded == PAIRS[name].to_dict(), name
        assert PairSpec(**loaded) == PAIRS[name]


def test_yamls_fit_the_runners_model_schema():
    schema = OmegaConf.structured(ModelConf)
    for path in MODEL_CONFIGS.glob("*.yaml"):
        merged = OmegaConf.merge(schema, OmegaConf.load(path))
        as_dict = OmegaConf.to_container(merged)
        assert PairSpec(**as_dict) == PAIRS[path.stem]
