"""The frontier's stop mass on the embedded pair against a brute force from the logits: the
drafter's and verifier's teacher-forced logits, processed as the engine does, each rule's
law on the whole 49,152-id vocabulary, summed over the pair's stop set. SpS's law(S) is q(S) at
every position (its ratio is 1 exactly), Cactus with stop=exact's too, and every arm's
law(S) is the frontier's to 1e-9, whatever the chunking and support compaction do."""

import pytest
import torch

from cactus_bench.engine import SamplingParams, process_logits
from cactus_bench.frontier.arms import build_arms
from cactus_bench.frontier.conf import FrontierConf
from cactus_bench.frontier.contexts import Contexts, encode_prompts
from cactus_bench.frontier.pipeline import measure_positions
from cactus_bench.models import load_pair
from cactus_bench.tasks.stop_set import stop_set

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("single_thread")]
ANSWERS = ("The capital of France is Paris.", "2 + 2 = 4, so the answer is 4.")
PROMPTS = ("What is the capital of France? One sentence.", "What is 2 + 2? Answer briefly.")


@torch.inference_mode()
def _law(model, prompt, answer, sampling) -> torch.Tensor:
    """[T, V] float64: the processed law at each answer position, from one plain forward."""
    logits = model(input_ids=torch.tensor([prompt + answer[:-1]])).logits[0, -len(answer) :]
    law = process_logits(logits, sampling).double()
    return law / law.sum(-1, keepdim=True)


def test_every_arms_stop_mass_is_its_law_on_the_vocabulary_from_the_logits():
    pair = load_pair("smollm2_135m", dtype="float32")
    stops = stop_set(pair.tokenizer, pair.chat_template_kwargs).stop_ids
    conf = FrontierConf(
        rules=["cactus", "tas", "topband", "additive", "greedy_margin"],
        deltas=[1.0],
        tas_thresholds=[0.09],
        topband_alphas=[0.2],
        additive_thresholds=[0.1],
        greedy_margins=[0.5],
        progress=False,
    )
    arms = build_arms(conf)
    prompts = encode_prompts(list(PROMPTS), pair.tokenizer, pair.chat_template_kwargs)
    closer = max(stops)  # <|im_end|>: each answer ends where the verifier stops its turn
    answers = [pair.tokenizer.encode(a, add_special_tokens=False) + [closer] for a in ANSWERS]
    contexts = Contexts(prompts, answers, ["demo", "demo"])  # no kept q: teacher-forced
    sampling = SamplingParams(conf.temperature, conf.top_p, conf.top_k)
    measured = measure_positions(conf, pair, contexts, arms, sampling)
    assert pair.token_map is None  # the rules' index space is the vocabulary itself
    both = list(zip(prompts, answers, strict=True))
    p = torch.cat([_law(pair.drafter, prompt, answer, sampling) for prompt, answer in both])
    q = torch.cat([_law(pair.verifier, prompt, answer, sampling) for prompt, answer in both])
    ids = list(stops)
    q_stop = q[:, ids].sum(-1)
    assert float(q_stop.max()) > 0.5  # the closing positions give S real mass
    torch.testing.assert_close(measured["verifier"]["stop_mass"], q_stop, atol=1e-6, rtol=0)
    law_stop = measured["stats"]["stop_mass"]
    # The frontier's p and q come from the same forwards: compare its arms on its own rows with
    # the brute force on these (1e-6: float32 logits of two forwards of one model)
    for index, arm in enumerate(arms):
        rule = arm.sampler()
        if arm.stop_exact:
            rule.stop_ids = torch.tensor(ids)
        law = rule.acceptance_and_law(p, q)[1]  # [T, 49152]
        torch.testing.assert_close(law_stop[index], law[:, ids].sum(-1), atol=1e-6, rtol=0)
        if arm.rule in ("sps", "cactus+stop=exact"):
            torch.testing.assert_close(law_stop[index], measured["verifier"]["stop_mass"])
    assert measured["at_stop"].sum() == 2
