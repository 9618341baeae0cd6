"""One run from a validated RunConf to a results row: what `run.py` calls.

    from cactus_bench.run import run, run_conf_from_dict, format_outcome
    outcome = run(run_conf_from_dict({"model": {...}, "task": {"name": "demo"}, ...}))
    print(format_outcome(outcome))

Order of work, cheapest first, so that a bad run fails before anything slow happens:
validate -> backend check -> the acceptance rule and the run's identity -> resume check (config
hash already finished? skip) -> claim (another process running this config now? skip) ->
measure (load, warm up, decode the task and its baseline, summarise) -> append ONE row (and
the per-request records) -> mirror to W&B. Any failure after the claim appends a status=error
row carrying the one-line message and no measurements, then re-raises.

No work is lost to an interruption: measure journals every request the moment it ends
(`run/resume.py`, `<results_dir>/<csv stem>.journal/<config hash>.jsonl`), and a rerun of a run
without a finished row replays the journal and decodes only the requests it lacks. A forced
rerun of a finished run (force=true) discards that run's journal first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from cactus_bench.run.backends import check_backend, resolve_device
from cactus_bench.run.checks import validate
from cactus_bench.run.conf import RunConf
from cactus_bench.run.console import RunOutcome
from cactus_bench.run.errors import error_text
from cactus_bench.run.identity import RunIdentity
from cactus_bench.run.measure import measure
from cactus_bench.run.preflight import preflight
from cactus_bench.run.resume import run_journal
from cactus_bench.run.wandb import mirror_to_wandb
from cactus_bench.samplers.params import RuleParams
from cactus_bench.store import ResultStore, run_metadata

if TYPE_CHECKING:
    from cactus_bench.samplers.base import AcceptanceRule


def build_identity(conf: RunConf) -> tuple[RunIdentity, AcceptanceRule | None]:
    """(identity, rule) of a config, validated here; rule is None for the verifier alone."""
    return identity_of(conf, validate(conf))


def identity_of(
    conf: RunConf, rule_params: RuleParams
) -> tuple[RunIdentity, AcceptanceRule | None]:
    """(identity, rule) of a config that `validate` passed, given the parameters it returned."""
    conf = dataclasses.replace(conf, device=resolve_device(conf.device))
    identity = RunIdentity(conf, rule_params)
    if not identity.speculative:
        return identity, None
    from cactus_bench.samplers.registry import build_rule  # lazy: torch, after the config checks

    return identity, build_rule(rule_params)


def run(conf: RunConf, rule_params: RuleParams | None = None) -> RunOutcome:
    """Run `conf` unless its config hash already has a finished row (then skip; force=true).

    `rule_params` is what `validate(conf)` returned when the caller validated already (run.py
    does, before importing anything heavy); without it, `conf` is validated here."""
    if rule_params is None:
        rule_params = validate(conf)
    check_backend(conf)
    identity, rule = identity_of(conf, rule_params)
    store = ResultStore(identity.results_csv)
    # Checked under the claim, so a run another process finished while this one waited to
    # start is seen as finished, not decoded again.
    with run_claim(identity) as claimed:
        if not conf.force and store.has_finished(identity.config_hash):
            print(
                f"skip: {identity.description} already has a finished row (config hash "
                f"{identity.config_hash}) in {identity.results_csv}; force=true reruns it",
                flush=True,
            )
            return RunOutcome("skipped", identity.results_csv, identity.config_hash)
        if not claimed:
            print(
                f"skip: {identity.description} (config hash {identity.config_hash}) is running "
                "in another process now; rerun after it ends to pick up its row",
                flush=True,
            )
            return RunOutcome("skipped", identity.results_csv, identity.config_hash)
        return _claimed_run(conf, identity, rule, store)


@contextlib.contextmanager
def run_claim(identity: RunIdentity) -> Iterator[bool]:
    """Holds `<journal>.claim` while this process runs the config; yields False (holding
    nothing) when another process holds it. Two workers sharing a sweep (a second
    `rules_board.py --reverse`, a job launched twice) then never decode the same config at
    once into one journal. The lock is fcntl's: a killed or requeued job's claim ends with its
    process, so a requeued job resumes at once."""
    journal = run_journal(identity).path
    journal.parent.mkdir(parents=True, exist_ok=True)
    claim = FileLock(str(journal) + ".claim")
    try:
        claim.acquire(timeout=0)
    except Timeout:
        yield False
        return
    try:
        yield True
    finally:
        claim.release()


def _claimed_run(
    conf: RunConf, identity: RunIdentity, rule: AcceptanceRule | None, store: ResultStore
) -> RunOutcome:
    """measure and append, under this process's claim on the config."""
    if conf.force and store.has_finished(identity.config_hash):
        run_journal(identity).discard()  # a forced rerun of a finished run decodes afresh
    preflight(identity.conf)  # task data and checkpoints reachable: before any model loads
    run_id = new_run_id()
    columns = identity.columns(run_id)
    device = identity.conf.device
    print(f"run {run_id}: {identity.description} on {device}", flush=True)
    try:
        measured = measure(identity, rule)
    except BaseException as error:  # KeyboardInterrupt too: leave a row saying what happened
        error_row = {**columns, **run_metadata(device), "status": "error"}
        message = error_text(error)
        if isinstance(error, SystemExit):  # submitit's exit after a time limit or preemption
            message += f"; finished requests stay in {run_journal(identity).path}: a rerun resumes"
        store.append({**error_row, "error": message})
        raise
    row = {**columns, **run_metadata(device), **measured.row, "status": "ok"}
    # Records first, the row last: a finished row is the commit mark resume trusts, so a run
    # killed in between leaves orphan records (its run_id has no row), never a row without them.
    store.append_records(run_id, measured.records, arm="spec")
    if measured.baseline_records is not None:
        store.append_records(run_id, measured.baseline_records, arm="baseline")
    for arm, steps in measured.step_logs.items():
        store.append_steps(run_id, arm, steps)
    store.append(row)
    if conf.logger.name == "wandb":
        try:
            mirror_to_wandb(identity, row, measured.records, measured.baseline_records)
        except Exception as error:  # the CSV is the source of truth; a W&B hiccup is a warning
            print(f"warning: W&B mirror failed ({error_text(error)}); the CSV row is written")
    return RunOutcome("ok", identity.results_csv, identity.config_hash, run_id, row)


def new_run_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"
