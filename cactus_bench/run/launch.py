"""The launch context every job of a sweep shares: git state, launch folder, relative paths.

The launching process pins these before Hydra starts any job, so that jobs (local processes,
Slurm arrays starting hours later, possibly from a changed checkout) record the commit that was
submitted and resolve relative paths against the folder run.py was started from. The Slurm
launcher's `setup` lines read them through the `${git_sha:}`, `${git_dirty:}` and
`${launch_dir:}` resolvers (configs/hydra/launcher/slurm.yaml).
"""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from cactus_bench.store.metadata import GIT_DIRTY_ENV, GIT_SHA_ENV, git_state

LAUNCH_DIR_ENV = "CACTUS_BENCH_LAUNCH_DIR"


def pin_launch_context() -> None:
    """Record git sha, dirty flag and launch folder in the environment, unless already pinned."""
    if not os.environ.get(GIT_SHA_ENV):
        sha, dirty = git_state()
        if sha:
            os.environ[GIT_SHA_ENV] = sha
            os.environ[GIT_DIRTY_ENV] = "" if dirty is None else str(dirty).lower()
    os.environ.setdefault(LAUNCH_DIR_ENV, os.getcwd())


def resolve_path(path: str | None) -> str | None:
    """A relative path taken against the launch folder (see pin_launch_context), else as is."""
    if path is None or os.path.isabs(path):
        return path
    return os.path.join(os.environ.get(LAUNCH_DIR_ENV, os.getcwd()), path)


def register_resolvers() -> None:
    """`${git_sha:}`, `${git_dirty:}`, `${launch_dir:}` for the slurm launcher's setup lines.

    The launcher resolves its fields when Hydra instantiates it, in the launching process and
    before any job config exists (so `${hydra:...}` is not available there).
    """
    resolvers = (
        ("git_sha", lambda: git_state()[0] or ""),
        ("git_dirty", lambda: "" if git_state()[1] is None else str(git_state()[1]).lower()),
        ("launch_dir", lambda: os.environ.get(LAUNCH_DIR_ENV, os.getcwd())),
    )
    for name, resolver in resolvers:
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
