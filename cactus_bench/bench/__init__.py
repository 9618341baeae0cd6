"""The benchmarks' shared code: what `scripts/bench_*.py`, `scripts/eval_drafter.py` and the GPU
check (cactus_bench/gpu_check/) measure with, so that each script is an entry point (arguments,
sections, output).

- `greedy.py`: greedy decoding as SamplingParams (the paper's law is engine.sampling's
  `PAPER_SAMPLING`);
- `timing.py`: CPU times of repeated calls and their spread (median and quartiles);
- `machine.py`: the facts every benchmark row records about the CPU it ran on;
- `models.py`: the benchmarked models (SmolLM2-135M and its drafter if cached, else tiny; or
  any registered pair);
- `engine_arms.py`: bench_engine.py's arms (our decoders, transformers' assisted and plain
  generation), interleaved, and their summary rows with the machine's columns;
- `drafter_eval.py`: eval_drafter.py's measures of the distilled drafter (held-out per-token
  acceptance, step costs, the cost model's speedup, end-to-end speed);
- `linear.py`, `draw.py`, `forward.py`, `decoders.py`: the linear-layer, token-draw/head,
  cached-forward and decoder benches that `bench_forward.py` runs as sections (the first two
  also have scripts of their own); `decoders.py` also builds a pair's sps decoder, which
  drafter_eval.py and the GPU check's checks share.
"""
