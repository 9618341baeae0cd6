"""baseline=cached: the verifier-only decode of a run's prompts, decoded at most once.

The key (RunIdentity.baseline_key) covers the verifier, the prompts as token ids, sampling,
dtype, max_new_tokens, seed and the device name. A verifier-only run stores its own records (it IS
the baseline) and reports no speedup; a speculative run reuses them or decodes the baseline once,
after its own decoding, and stores it for the next run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cactus_bench.results import BaselineCache, device_name
from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.launch import resolve_path


def cached_baseline(identity: RunIdentity, records: list, decode: Callable[[], list]):
    """The cached baseline records of these prompts (decoded and stored on a miss); None for a
    verifier-only run, whose own records are stored instead."""
    conf = identity.conf
    folder = resolve_path(conf.baseline_dir) or Path(resolve_path(conf.results_dir)) / "baselines"
    cache = BaselineCache(folder)
    prompts = [list(_field(r, "prompt_ids")) for r in records]
    key = identity.baseline_key(prompts, device_name(conf.device))
    meta = {"model_pair": conf.model.name, "task": conf.task.name, "limit": conf.limit}
    if not identity.speculative:
        cache.put(key, records, meta=meta)
        return None
    cached = cache.get(key)
    if cached is not None:
        print(f"baseline: reusing the cached verifier-only decode {key}", flush=True)
        return cached
    print("baseline: no cached verifier-only decode of these prompts; decoding it once", flush=True)
    baseline = list(decode())
    if [list(_field(r, "prompt_ids")) for r in baseline] != prompts:
        raise RuntimeError(
            "the baseline decoded different prompts than the run; the task's "
            "prompts must not depend on the decoder"
        )
    cache.put(key, baseline, meta=meta)
    return baseline


def _field(record, name: str):
    return record[name] if isinstance(record, dict) else getattr(record, name)
