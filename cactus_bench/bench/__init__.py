"""The benchmarks' shared code: what `scripts/bench_*.py`, `scripts/eval_drafter.py`,
`scripts/gpu_bench.py` and the GPU check (cactus_bench/gpu_check/) measure with, so that each
script is an entry point (arguments, sections, output).

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
  drafter_eval.py and the GPU check's checks share;
- `op_count.py`, `step_ops.py`, `layer_kernels.py`: GPU proxies counted on any machine: the aten
  ops and stalls a piece of code makes, those counts per forward, rule `verify` and engine step
  (`bench_step_ops.py`), and the kernels per decoder layer of the static forward;
- `gpu_costs.py`, `gpu_engine.py`, `gpu_profile.py`, `gpu_forecast.py`: what `make gpu-bench`
  measures on one GPU: forwards and rules beside their floors, the engine end to end and what
  ran there, the kernels of one drafter forward, and the step cost and speedup forecast from
  those parts; `gpu_compiled.py`: compiled timings that refuse a graph with no ops (for
  gpu_costs.py).
"""
