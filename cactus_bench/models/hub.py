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
from pathlib import Path

COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")


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
    from huggingface_hub import constants

    names = {type(e).__name__ for e in _chain(error)}
    wanted = f"{model_id} (revision {revision})" if revision else model_id
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
    repo_dir = cache / ("models--" + model_id.replace("/", "--"))
    if not repo_dir.is_dir():
        return f"{wanted} is not in the Hugging Face cache {cache} and {hub_state}: {fix}"
    contents = _cache_contents(repo_dir)
    ref = revision or "main"
    commit = ref if COMMIT_HASH.match(ref) else None
    if commit is None and (repo_dir / "refs" / ref).is_file():
        commit = (repo_dir / "refs" / ref).read_text().strip()
    if commit is None or not (repo_dir / "snapshots" / commit).is_dir():
        return (
            f"revision {ref} of {model_id} is not in the cache {repo_dir} (it holds {contents}) "
            f"and {hub_state}: {fix}, or pin a cached commit in model.{role}_revision"
        )
    return (
        f"{model_id} at {commit[:12]} in {repo_dir} is incomplete ({type(error).__name__}: "
        f"{str(error).splitlines()[0] if str(error) else ''}) and {hub_state}: {fix}"
    )
