"""baseline=cached: the verifier-only decode of a sweep's prompts, decoded once per sweep.

Two keys, both from RunIdentity.baseline_key (verifier and its revision, task, sampling, dtype,
max_new_tokens, seed, the device timed on):
- the SWEEP key, known before anything decodes: it stands for the prompts by what fixes them
  (task, limit, repeats, data folder, chat-template variables). It names a lock and a journal
  (`<baselines>/<sweep key>.lock`, `.journal.jsonl`): the first job that needs the baseline
  decodes it holding the lock, request by request into the journal, and every other arm of the
  sweep (any rule, any m, any delta) waits on the lock and then replays it from disk. A
  verifier-only run of the sweep decodes INTO that journal, so its own row and every arm's
  speedup come from one decode. A job killed mid-baseline leaves the journal for the next.
- the PROMPTS key (the prompts as token ids) names the finished baseline's records
  (`<baselines>/<prompts key>.json`), which a speculative run checks first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from cactus_bench.results import BaselineCache, device_name
from cactus_bench.results.journal import RecordJournal
from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.launch import resolve_path


def cache_folder(identity: RunIdentity) -> Path:
    conf = identity.conf
    return resolve_path(conf.baseline_dir) or Path(resolve_path(conf.results_dir)) / "baselines"


def sweep_key(identity: RunIdentity) -> str:
    """The baseline's key before its prompts are known (replay checks the prompt ids anyway)."""
    conf = identity.conf
    data = resolve_path(conf.data_dir) if conf.task.name != "demo" else "package"
    prompts_source = [
        f"limit={conf.limit}",
        f"repeats={conf.repeats}",
        f"data={data}",
        f"chat_template_kwargs={sorted(conf.model.chat_template_kwargs.items())}",
    ]
    return identity.baseline_key(prompts_source, device_name(conf.device))


def baseline_journal(identity: RunIdentity) -> RecordJournal:
    return RecordJournal(cache_folder(identity) / f"{sweep_key(identity)}.journal.jsonl")


@contextlib.contextmanager
def sweep_lock(identity: RunIdentity) -> Iterator[None]:
    """Held while this job decodes (or replays) the sweep's baseline; others wait here."""
    folder = cache_folder(identity)
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(folder / f"{sweep_key(identity)}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print("baseline: another job is decoding this sweep's baseline; waiting for it", flush=True)
        lock.acquire()  # a killed holder's lock goes with its process (fcntl)
    try:
        yield
    finally:
        lock.release()


def cached_baseline(
    identity: RunIdentity, records: list, decode: Callable[[RecordJournal], list]
) -> list | None:
    """The baseline records of these prompts: from the cache, else replayed from or decoded into
    the sweep's journal by `decode(journal)` under the sweep lock. None for a verifier-only
    run, whose own records are stored as the baseline instead."""
    conf = identity.conf
    cache = BaselineCache(cache_folder(identity))
    prompts = [list(_field(r, "prompt_ids")) for r in records]
    key = identity.baseline_key(prompts, device_name(conf.device))
    meta = {"model_pair": conf.model.name, "task": conf.task.name, "limit": conf.limit}
    if not identity.speculative:
        cache.put(key, records, meta=meta)
        return None
    cached = cache.get(key)
    if cached is None:
        with sweep_lock(identity):
            cached = cache.get(key)  # finished by the job we waited for
            if cached is None:
                print("baseline: not cached for these prompts; decoding it once", flush=True)
                cached = list(decode(baseline_journal(identity)))
                if [list(_field(r, "prompt_ids")) for r in cached] != prompts:
                    raise RuntimeError(
                        "the baseline decoded different prompts than the run; the task's "
                        "prompts must not depend on the decoder"
                    )
                cache.put(key, cached, meta=meta)
                return cached
    print(f"baseline: reusing the cached verifier-only decode {key}", flush=True)
    return cached


def _field(record, name: str):
    return record[name] if isinstance(record, dict) else getattr(record, name)
