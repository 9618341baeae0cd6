"""A verifier dispatched by accelerate (a device_map spreading or offloading layers) decodes the
same greedy tokens as the unsplit model: the fast forward steps aside for HF's own forward, with
one logged line, instead of bypassing accelerate's per-layer hooks. On CPU, with the tiny pair."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from accelerate import cpu_offload, dispatch_model

from cactus_bench.engine import AutoregressiveDecoder, SamplingParams, SpeculativeDecoder
from cactus_bench.engine.fast_runner import FastRunner, dispatch_reason
from cactus_bench.engine.runtime import ModelRunner, make_runner
from cactus_bench.samplers import make_sampler

pytestmark = pytest.mark.usefixtures("single_thread")
GREEDY = SamplingParams(temperature=0.0)
PROMPT = "Name three colours and say why."
# Layer 1 lives on disk and is loaded by its hook for each forward; the rest stays on the CPU.
SPREAD = {
    "model.embed_tokens": "cpu",
    "model.rotary_emb": "cpu",
    "model.layers.0": "cpu",
    "model.layers.1": "disk",
    "model.layers.2": "cpu",
    "model.norm": "cpu",
    "lm_head": "cpu",
}


@pytest.fixture(params=["device_map", "cpu_offload"])
def dispatched(request, tiny_pair, tmp_path):
    _, verifier, _ = tiny_pair
    model = copy.deepcopy(verifier)
    if request.param == "device_map":
        model = dispatch_model(model, device_map=SPREAD, main_device="cpu", offload_dir=tmp_path)
        model.hf_device_map = dict(SPREAD)  # what from_pretrained(device_map=...) records
    else:
        model = cpu_offload(model, execution_device=torch.device("cpu"))
    return model.eval()


def test_dispatched_verifier_runs_hf_forward_with_one_logged_line(dispatched, tiny_pair, caplog):
    _, verifier, _ = tiny_pair
    assert dispatch_reason(verifier) is None  # the unsplit model keeps the fast forward
    assert isinstance(make_runner(verifier, torch.device("cpu")), FastRunner)
    with caplog.at_level(logging.INFO, logger="cactus_bench.engine.runtime"):
        runner = make_runner(dispatched, torch.device("cpu"))
    assert isinstance(runner, ModelRunner)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "eager HF forward" in line and "dispatched by accelerate" in line
    with pytest.raises(ValueError, match="fast='on' cannot run .*dispatched by accelerate"):
        make_runner(dispatched, torch.device("cpu"), fast="on")


def test_dispatched_verifier_decodes_the_unsplit_greedy_tokens(dispatched, tiny_pair):
    drafter, verifier, tokenizer = tiny_pair
    prompt = tokenizer.encode(PROMPT)

    def autoregressive(model):
        decoder = AutoregressiveDecoder(model, tokenizer, sampling=GREEDY, device="cpu")
        return decoder.generate(prompt, max_new_tokens=24, seed=0).output_ids

    def speculative(model):
        decoder = SpeculativeDecoder(
            drafter,
            model,
            tokenizer,
            make_sampler("greedy"),
            num_draft_tokens=3,
            sampling=GREEDY,
            device="cpu",
        )
        return decoder.generate(prompt, max_new_tokens=24, seed=0).output_ids

    unsplit = autoregressive(verifier)
    assert len(unsplit) == 24
    assert autoregressive(dispatched) == unsplit
    assert speculative(dispatched) == speculative(verifier) == unsplit  # greedy is lossless
