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

A finished baseline stores the machine it was decoded on (host, CPU, device), the commit and
the load and time when its decode began and ended (store/machine_state.py). A run reusing it
records the gap in time and load; one decoded more than `baseline_max_age_h` hours ago, or on
another CPU or device model, is refused in one line that says how to refresh it. The host is
recorded, not compared: a Slurm sweep's jobs run on sibling nodes of one kind.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.launch import resolve_path
from cactus_bench.store import BaselineCache, device_name, git_state
from cactus_bench.store.journal import RecordJournal
from cactus_bench.store.machine_state import cached_refusal, load_now, machine_identity


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


class StaleBaseline(RuntimeError):
    """A cached baseline that may not serve this run (too old, another machine)."""


def machine_state(identity: RunIdentity, load_at: dict) -> dict:
    """The state a finished baseline is stored with: its machine, commit and start/end load."""
    return {
        "machine": machine_identity(identity.conf.device),
        "commit": git_state()[0],
        # every request replayed from the journal: this attempt saw no decode, so now
        "start": load_at.get("start") or load_now(),
        "end": load_at.get("end") or load_now(),
    }


def cached_baseline(
    identity: RunIdentity,
    records: list,
    decode: Callable[[RecordJournal], tuple[list, dict]],
    load_at: dict,
) -> tuple[list | None, dict | None]:
    """(the baseline records of these prompts, the machine state they were decoded in): from
    the cache, else replayed from or decoded into the sweep's journal by `decode(journal)` (its
    records and load_at) under the sweep lock. (None, None) for a verifier-only run, whose own
    records (and `load_at`) are stored as the baseline instead."""
    conf = identity.conf
    cache = BaselineCache(cache_folder(identity))
    prompts = [list(_field(r, "prompt_ids")) for r in records]
    key = identity.baseline_key(prompts, device_name(conf.device))
    meta = {"model_pair": conf.model.name, "task": conf.task.name, "limit": conf.limit}
    if not identity.speculative:
        cache.put(key, records, meta={**meta, "machine_state": machine_state(identity, load_at)})
        return None, None
    cached = cache.get(key)
    if cached is None:
        with sweep_lock(identity):
            cached = cache.get(key)  # finished by the job we waited for
            if cached is None:
                print("baseline: not cached for these prompts; decoding it once", flush=True)
                cached, decoded_at = decode(baseline_journal(identity))
                cached = list(cached)
                if [list(_field(r, "prompt_ids")) for r in cached] != prompts:
                    raise RuntimeError(
                        "the baseline decoded different prompts than the run; the task's "
                        "prompts must not depend on the decoder"
                    )
                state = machine_state(identity, decoded_at)
                cache.put(key, cached, meta={**meta, "machine_state": state})
                return cached, state
    stored = cache.meta(key) or {}
    refresh = (
        f"rm {cache.path(key)} {baseline_journal(identity).path} to decode a fresh one (this "
        "run's own requests are journaled: the rerun replays them)"
    )
    refusal = cached_refusal(
        stored, machine_identity(conf.device), conf.baseline_max_age_h, refresh
    )
    if refusal:
        raise StaleBaseline(refusal)
    print(f"baseline: reusing the cached verifier-only decode {key}", flush=True)
    return cached, stored["machine_state"]


def _field(record, name: str):
    return record[name] if isinstance(record, dict) else getattr(record, name)
