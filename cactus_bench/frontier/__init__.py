"""The frontier: every rule's exact acceptance and divergence on real contexts.

    python run.py experiment=frontier                 # Hydra preset (configs/experiment/)
    python -m cactus_bench.frontier --pair tiny_random --prompts demo --num-demo 4
    python -m cactus_bench.frontier plots --csv results/frontier/smollm2_135m.csv

    from cactus_bench.frontier import FrontierConf, run_frontier
    outcome = run_frontier(FrontierConf(...))   # -> results/frontier/<pair>.csv + figures

Modules, in pipeline order: conf (settings, no torch), contexts (verifier samples, cached),
teacher (p_t, q_t on their support), stats (exact per-position statistics of every arm),
aggregate (bootstrap over sequences), al (predicted AL(m)), rows (the CSV), engine_check (the
engine against the prediction), plots (figures), pipeline (run_frontier).
"""

from cactus_bench.frontier.conf import FrontierConf, FrontierConfigError

__all__ = ["FrontierConf", "FrontierConfigError", "run_frontier"]


def __getattr__(name: str):
    if name == "run_frontier":
        from cactus_bench.frontier.pipeline import run_frontier  # lazy: FrontierConf without torch

        return run_frontier
    raise AttributeError(f"module 'cactus_bench.frontier' has no attribute {name!r}")
