"""backend=hf: this project's draft-verify engine over a loaded transformers pair."""

from __future__ import annotations

import dataclasses

from cactus_bench.engine import AutoregressiveDecoder, SpeculativeDecoder
from cactus_bench.models import PairSpec, load_pair
from cactus_bench.run.backends.decoder_pair import Decoders, sampling_params
from cactus_bench.run.identity import RunIdentity
from cactus_bench.samplers.base import AcceptanceRule
from cactus_bench.tasks.stop_set import stop_set


def hf_decoders(identity: RunIdentity, rule: AcceptanceRule | None) -> Decoders:
    """Load the pair; the speculative decoder (or the verifier alone) and the baseline's."""
    conf = identity.conf
    pair = load_pair(PairSpec(**dataclasses.asdict(conf.model)), device=conf.device)
    sampling = sampling_params(conf)
    engine = {  # the same forward path for both arms
        "fast": conf.engine.fast,
        "compile": conf.engine.compile,
        "cuda_graphs": conf.engine.cuda_graphs,
    }

    def verifier_only() -> AutoregressiveDecoder:
        return AutoregressiveDecoder(
            pair.verifier,
            pair.tokenizer,
            sampling=sampling,
            device=conf.device,
            token_map=pair.token_map,  # the same restricted law as the speculative arm
            **engine,
        )

    if identity.speculative and identity.rule_params.guards_set():
        # the guards' stop and think ids (samplers/guards.py), from the tokenizer and template
        rule.vocab_stop_set = stop_set(pair.tokenizer, dict(pair.chat_template_kwargs))
    if identity.speculative:
        decoder = SpeculativeDecoder(
            pair.drafter,
            pair.verifier,
            pair.tokenizer,
            rule,
            num_draft_tokens=conf.m,
            sampling=sampling,
            device=conf.device,
            token_map=pair.token_map,
            out_of_head_c=conf.out_of_head_c,  # the diagnostic's c; the batched step reads it too
            **engine,
        )
    else:
        decoder = verifier_only()
    interleave = identity.speculative and conf.baseline == "interleave"
    return Decoders(
        decoder=decoder,
        interleaved=verifier_only() if interleave else None,
        verifier_only=verifier_only,
        tokenizer=pair.tokenizer,
        chat_template_kwargs=dict(pair.chat_template_kwargs),
    )
