"""Code the tests share, one module per meaning (a test module imports from here, never from
another test module; fixtures live in tests/conftest.py):

- `laws.py`: the statistics the law tests share (chi-square p-values and statistics, the suite's
  rejection level), the verifier's exact next-token law, the rules with their test parameters
  and the small truncated pair, and FLy's reference law of a whole step;
- `runs.py`: composed run configs (the tiny run, the paper cell, any overrides), CSV rows, the
  counted columns a resumed row must repeat, and the test Slurm cluster's queue;
- `scripts.py`: a script of scripts/ loaded as a module;
- `tasks.py`: a decoder that answers from a script, test-local caches, and small GSM8K and GPQA
  data folders;
- `vllm_fakes.py`: stand-ins for vLLM's objects (LLM, metrics, sampling metadata, the V1
  rejection module, V2's draft-logits cache) and a host-read counter; no vLLM needed;
- `vllm_sources.py`: vLLM's sources (wheels and the installed copy), read with `ast`, and the
  checker the conformance tests share.
"""
