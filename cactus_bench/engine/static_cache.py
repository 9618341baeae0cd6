"""The fast forward's KV cache: preallocated buffers and an explicit length.

A forward over n tokens writes positions length..length+n-1 in place; rolling back rejected
tokens is `crop(length)`, i.e. moving the length (no tensor copies). Entries beyond the length
are stale: the attention mask hides them and the next forward overwrites them. Capacities are
powers of two from MIN_CAPACITY, so compiled graphs see few distinct shapes.
"""

from __future__ import annotations

import torch

MIN_CAPACITY = 256


class StaticKVCache:
    """Preallocated keys/values ([1, H_kv, capacity, D] per layer) and the number of valid
    positions. Owned by one `FastRunner`, which recycles the buffers for its next request."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self.keys, self.values = keys, values
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, length: int) -> None:
        """Rolls back to the first `length` positions: only the length moves."""
        if not 0 <= length <= self.length:
            raise RuntimeError(f"cannot crop a cache of {self.length} to {length} tokens")
        self.length = length


def bucket(capacity: int) -> int:
    """The smallest power of two >= max(capacity, MIN_CAPACITY)."""
    size = MIN_CAPACITY
    while size < capacity:
        size *= 2
    return size
