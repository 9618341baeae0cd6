"""Decoders on each forward path and their interleaved tokens/s (bench_forward.py's sections).

A path is (fast, compile, linear kernel) as the decoders and `runtime.DEFAULT_LINEAR_KERNEL`
take them: hf_eager (HF's forward), fast_aten (the fast forward on ATen's `F.linear`), fast
(the default: oneDNN packs where `cpu_kernels` picks them), fast_compiled (torch.compile).
"""

from __future__ import annotations

import statistics
import time

from tqdm import tqdm

from cactus_bench.engine import AutoregressiveDecoder, SpeculativeDecoder, runtime
from cactus_bench.samplers import make_sampler

# path -> (fast, compile, linear kernel) as the decoders take them
PATHS = {
    "hf_eager": ("off", "off", "aten"),
    "fast_aten": ("on", "off", "aten"),
    "fast": ("on", "off", "auto"),
    "fast_compiled": ("on", "on", "aten"),
}


def sps_decoder(pair, m: int, **options) -> SpeculativeDecoder:
    """`pair`'s speculative decoder with sps (the lossless rule) and m drafts per step;
    `options` go to SpeculativeDecoder (sampling, device, compile, ...)."""
    drafter, verifier, tokenizer = pair.drafter, pair.verifier, pair.tokenizer
    return SpeculativeDecoder(
        drafter, verifier, tokenizer, make_sampler("sps"), num_draft_tokens=m, **options
    )


def decoder_for(path: str, verifier, tokenizer, drafter=None, m: int = 0):
    fast, compiled, kernel = PATHS[path]
    runtime.DEFAULT_LINEAR_KERNEL = kernel  # the decoders' runners take it from here
    try:
        if drafter is None:
            return AutoregressiveDecoder(
                verifier, tokenizer, eos_token_ids=[], fast=fast, compile=compiled
            )
        return SpeculativeDecoder(
            drafter,
            verifier,
            tokenizer,
            make_sampler("sps"),
            m,
            eos_token_ids=[],
            fast=fast,
            compile=compiled,
        )
    finally:
        runtime.DEFAULT_LINEAR_KERNEL = "auto"


def bench_decode(decoders: dict, prompt: list[int], args, sampling, seeds, between=None):
    """Median tokens/s of each decoder, interleaved per seed (EOS ignored): over the wall time of
    its decode (prefill excluded), and over the CPU time of the whole request (prefill included;
    less disturbed by other jobs). `between(seed)` runs after each round (e.g. a vLLM
    measurement); its wall rates are kept too."""
    rates: dict = {name: [] for name in decoders}
    cpu_rates: dict = {name: [] for name in decoders}
    for seed in tqdm(seeds, desc="decode"):
        for name, decoder in decoders.items():
            cpu = time.process_time()
            rec = decoder.generate(prompt, args.max_new_tokens, seed=seed, sampling=sampling)
            cpu_rates[name].append(rec.num_generated / (time.process_time() - cpu))
            rates[name].append(rec.num_generated / (rec.total_time_s - rec.prefill_time_s))
        for name, rate in (between(seed) if between else {}).items():
            rates.setdefault(name, []).append(rate)
    return (
        {name: statistics.median(values) for name, values in rates.items()},
        {name: statistics.median(values) for name, values in cpu_rates.items()},
    )
