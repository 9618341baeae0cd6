"""The rehearsal: the paper's pairs as tiny random checkpoints in a local hub cache.

Real architecture classes, vocabulary sizes, config fields and (for Qwen3) the real tokenizer;
random weights of a few layers. `scripts/rehearse.py` (`make rehearse`) builds the cache and
runs every pair through `run.py` offline, proving the plumbing a GPU user relies on (hub-id
resolution, revisions, tokenizer checks, chat templates, V = 151,936 through the engine and the
samplers, the DeepSeek token_map), not output quality.

    from cactus_bench.rehearsal import build_hub_cache, hub_pairs, pinned_revisions
    hub = build_hub_cache(revisions=pinned_revisions(hub_pairs()))
"""

from cactus_bench.rehearsal.cache import (
    build_hub_cache,
    default_home,
    default_qwen3_dir,
    repo_folder,
)
from cactus_bench.rehearsal.hub_models import HUB_MODELS, HubModel, hub_model
from cactus_bench.rehearsal.pairs import hub_pairs, is_hub_id, pinned_revisions

__all__ = [
    "HUB_MODELS",
    "HubModel",
    "build_hub_cache",
    "default_home",
    "default_qwen3_dir",
    "hub_model",
    "hub_pairs",
    "is_hub_id",
    "pinned_revisions",
    "repo_folder",
]
