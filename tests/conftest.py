"""Shared fixtures: the tiny in-memory model pair (built once per session) and a one-thread mode."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_pair():
    """(drafter, verifier, tokenizer) from `make_tiny_pair(seed=0)`; eval mode, do not mutate."""
    from cactus_bench.models.tiny import make_tiny_pair

    return make_tiny_pair(seed=0)


@pytest.fixture(scope="module")
def single_thread():
    """Tiny models are dominated by per-op overhead: on a shared 2-core machine one torch
    thread is ~10x faster than two fighting for cores. Opt in with
    `pytestmark = pytest.mark.usefixtures("single_thread")`."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
