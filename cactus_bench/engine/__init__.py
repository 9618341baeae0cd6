"""The draft-verify engine (HF transformers) and the verifier-only baseline (vLLM: ../vllm).

from cactus_bench.engine import SamplingParams, SpeculativeDecoder, AutoregressiveDecoder
sp = SamplingParams(temperature=0.6, top_p=0.95, top_k=20)   # temperature 0 => greedy
dec = SpeculativeDecoder(drafter, verifier, tokenizer, make_sampler("cactus", delta=0.75),
                         num_draft_tokens=10, sampling=sp)
rec = dec.generate(prompt_ids, max_new_tokens=256, stop=["\\n\\n"], seed=1234)
rec.accepted_length, rec.tokens_per_step, rec.text

records = dec.generate_batch([BatchRequest(prompt_ids, 256, seed=1), ...], batch=8)
dec.step_log                                 # per prefill / decode step: rows, tokens, times
(see batched.py: continuous batching, per-request seeds, how times are attributed)
"""

from cactus_bench.engine.autoregressive import AutoregressiveDecoder
from cactus_bench.engine.batched import BatchStep
from cactus_bench.engine.decoder import Decoder
from cactus_bench.engine.record import RequestRecord
from cactus_bench.engine.requests import BatchRequest, Request
from cactus_bench.engine.sampling import SamplingParams, process_logits, sample_token
from cactus_bench.engine.speculative import SpeculativeDecoder
from cactus_bench.engine.stopping import cut_at_stop

__all__ = [
    "AutoregressiveDecoder",
    "BatchRequest",
    "BatchStep",
    "Decoder",
    "Request",
    "RequestRecord",
    "SamplingParams",
    "SpeculativeDecoder",
    "cut_at_stop",
    "process_logits",
    "sample_token",
]
