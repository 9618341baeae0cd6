"""gpu_check's vLLM worker, run with .venv-vllm's python (vLLM lives in its own environment).

    .venv-vllm/bin/python scripts/gpu_check_vllm.py < job.json   # prints RESULT <json>

The job comes from cactus_bench/gpu_check/vllm_check.py, which judges the answer; what the
worker runs (the installed line's runner with the rule and the other runner refused, vLLM's
greedy tokens, self-drafting, vLLM's rejection sampler against sps at V = 151,936) is
cactus_bench/gpu_check/vllm_worker.py.
The package comes from the environment: `make setup-vllm` installs this checkout editable.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from cactus_bench.gpu_check.vllm_worker import run

    job = json.loads(sys.stdin.read())
    print("RESULT " + json.dumps(run(job)), flush=True)


if __name__ == "__main__":
    main()
