"""Why a hub checkpoint could not be loaded, in one line that names the fix.

transformers reports every failed hub load on an offline cluster node with the same two lines
("We couldn't connect to 'https://huggingface.co' ... couldn't find them in the cached files"),
naming neither the model, the revision nor the cache it looked in. `load_pair` turns such
errors into `HubModelUnavailable` with what a user needs: which repo and revision, which cache
folder, what that cache does hold, and the command that fixes it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")
PROBE_TIMEOUT_S = 3.0


class HubModelUnavailable(OSError):
    """A hub model (or its revision) is neither cached nor downloadable; one-line message."""


def _chain(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def _cache_contents(repo_dir: Path) -> str:
    """`refs main -> 1a2b3c4d5e6f; snapshots 1a2b3c4d5e6f` for the error message."""
    refs = sorted(p for p in (repo_dir / "refs").rglob("*") if p.is_file())
    snapshots = sorted(p.name for p in (repo_dir / "snapshots").glob("*") if p.is_dir())
    named = [f"{p.relative_to(repo_dir / 'refs')} -> {p.read_text()[:12]}" for p in refs]
    parts = ["refs " + ", ".join(named)] if named else []
    parts.append("snapshots " + (", ".join(s[:12] for s in snapshots) or "none"))
    return "; ".join(parts)


def explain_unavailable(
    model_id: str, revision: str | None, role: str, error: BaseException
) -> str | None:
    """The one-line reason `model_id` could not be loaded, or None for unrelated errors.

    role: "drafter" or "verifier", naming the config keys (model.<role>, model.<role>_revision).
    """
    names = {type(e).__name__ for e in _chain(error)}
    page = f"https://huggingface.co/{model_id}"
    if "GatedRepoError" in names:
        return (
            f"{model_id} is a gated repository: accept its license at {page} with your account, "
            "then log in on this machine (`hf auth login`, or set HF_TOKEN)"
        )
    if "RevisionNotFoundError" in names:
        return (
            f"{model_id} has no revision {revision!r} on the hub: fix model.{role}_revision "
            f"(a branch, tag or 40-hex commit listed at {page}/commits/main)"
        )
    if "RepositoryNotFoundError" in names:
        return (
            f"{model_id} does not exist on the hub (or is private): check model.{role}, "
            "or log in (`hf auth login`) if it is a private repository"
        )
    local_miss = {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "IncompleteSnapshotError"}
    if not names & local_miss:
        return None
    return explain_not_cached(model_id, revision, role, error)


def _repo_dir(model_id: str) -> Path:
    from huggingface_hub import constants  # lazy: keeps huggingface_hub out of the run's identity

    return Path(constants.HF_HUB_CACHE) / ("models--" + model_id.replace("/", "--"))


def cached_snapshot(model_id: str, revision: str | None) -> Path | None:
    """The snapshot folder huggingface_hub would load `revision` from offline, if any."""
    repo_dir = _repo_dir(model_id)
    ref = revision or "main"
    commit = ref if COMMIT_HASH.match(ref) else None
    if commit is None and (repo_dir / "refs" / ref).is_file():
        commit = (repo_dir / "refs" / ref).read_text().strip()
    snapshot = repo_dir / "snapshots" / commit if commit else None
    return snapshot if snapshot is not None and snapshot.is_dir() else None


def hub_commit(model_id: str, revision: str | None) -> str | None:
    """The cached commit a hub id's `revision` resolves to; None for embedded ids, GGUF files,
    local folders and checkpoints not in the cache."""
    local = model_id.endswith(".gguf") or Path(model_id).expanduser().exists()
    if model_id.startswith("embedded:") or local or model_id.count("/") != 1:
        return None
    snapshot = cached_snapshot(model_id, revision)
    return snapshot.name if snapshot is not None else None


def explain_not_cached(
    model_id: str, revision: str | None, role: str, error: BaseException | None = None
) -> str:
    """Why the cache cannot serve `model_id` at `revision`, and the fix (one line)."""
    from huggingface_hub import constants  # lazy: keeps huggingface_hub out of the run's identity

    wanted = f"{model_id} (revision {revision})" if revision else model_id
    cache = Path(constants.HF_HUB_CACHE)
    hub_state = (
        "the hub is switched off (HF_HUB_OFFLINE=1)"
        if constants.is_offline_mode()
        else "the hub cannot be reached"
    )
    download = f"`hf download {model_id}" + (f" --revision {revision}`" if revision else "`")
    home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    fix = (
        f"run {download} on a machine with internet into this cache (HF_HOME={home}), "
        f"or set model.{role} to a local folder"
    )
    repo_dir = _repo_dir(model_id)
    if not repo_dir.is_dir():
        return f"{wanted} is not in the Hugging Face cache {cache} and {hub_state}: {fix}"
    snapshot = cached_snapshot(model_id, revision)
    if snapshot is None:
        return (
            f"revision {revision or 'main'} of {model_id} is not in the cache {repo_dir} (it "
            f"holds {_cache_contents(repo_dir)}) and {hub_state}: {fix}, or pin a cached commit "
            f"in model.{role}_revision"
        )
    problem = f"{type(error).__name__}: {str(error).splitlines()[0]}" if error else "no config.json"
    where = f"{model_id} at {snapshot.name[:12]} in {repo_dir}"
    return f"{where} is incomplete ({problem}) and {hub_state}: {fix}"


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """One HEAD request to the hub endpoint, no retries (huggingface_hub retries each file)."""
    from huggingface_hub import constants  # lazy: keeps huggingface_hub out of the run's identity
    from huggingface_hub.utils import get_session  # lazy: as above

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
    except Exception:  # DNS failure, refused or dropped connection, proxy error: unreachable
        return False
    return True


def go_offline_if_unreachable(models: list[tuple[str, str, str | None]]) -> None:
    """Before loading hub checkpoints (role, repo id, revision): when the hub cannot be reached
    and every one of them is in the cache, switch this process to offline mode (and say so);
    when one is missing, fail at once with the fix.

    Why: on a compute node without internet and without HF_HUB_OFFLINE=1, huggingface_hub
    retries each of the ~14 files a pair looks up 5 times with back-off, about 23 s each when
    DNS fails at once (measured: 5 min 56 s for one run that takes 30 s offline) and longer
    when the firewall drops packets; every job of a Slurm array would pay it.
    """
    from huggingface_hub import constants  # lazy: keeps huggingface_hub out of the run's identity

    if constants.is_offline_mode() or hub_reachable():
        return
    for role, model_id, revision in models:
        snapshot = cached_snapshot(model_id, revision)
        if snapshot is None or not (snapshot / "config.json").exists():
            raise HubModelUnavailable(explain_not_cached(model_id, revision, role))
    constants.HF_HUB_OFFLINE = True  # huggingface_hub and transformers read it at call time
    os.environ["HF_HUB_OFFLINE"] = "1"  # and processes started from here
    names = ", ".join(sorted({model_id for _, model_id, _ in models}))
    print(
        f"hub: {constants.ENDPOINT} cannot be reached; loading {names} from the cache "
        f"{constants.HF_HUB_CACHE} offline (export HF_HUB_OFFLINE=1 to skip this check)",
        file=sys.stderr,
        flush=True,
    )
