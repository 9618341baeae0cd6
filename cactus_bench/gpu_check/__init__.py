"""The GPU check (`make gpu-check`, scripts/gpu_check.py): what a first GPU contact needs.

- `suite.py`: the checks' names and order (`CHECKS`), the CUDA precondition (`cuda_problem`),
  the shared pairs and prompts (`Context`), `run_checks` (timed, guarded, within a budget);
- `measurements.py`: on the embedded pair, greedy equality up to near-ties, compiled vs eager, the
  samplers' verify vs the naive path, verifier step costs, the pair's speedup;
- `laws.py`: on random models, Qwen3's vocabulary and the first emitted token's law;
- `vllm_check.py`: hands .venv-vllm's worker a job and judges its answer;
- `vllm_worker.py`: that worker's side, run by scripts/gpu_check_vllm.py with .venv-vllm's
  python (it imports only the package's torch-level layers and vLLM).
Nothing here imports at package level: .venv-vllm imports this package too.
"""
