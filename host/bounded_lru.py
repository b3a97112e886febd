"""A map bounded in entries and in a size its user counts (bytes, characters): when either bound
is passed, the least recently used entries go first.

Not locked: its users hold their own lock, which also guards what they keep beside it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedLru(Generic[K, V]):
    def __init__(self, max_entries: int, max_size: int) -> None:
        self.max_entries = max_entries
        self.max_size = max_size
        self.size = 0  # the sum of the sizes of the entries kept
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def keys(self) -> Iterator[K]:
        """The keys, least recently used first (a snapshot: the caller may pop while iterating)."""
        return iter(list(self._entries))

    def get(self, key: K) -> V | None:
        """The value kept for `key` (now the most recently used), or None."""
        kept = self._entries.get(key)
        if kept is None:
            return None
        self._entries.move_to_end(key)
        return kept[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep `value` (replacing what `key` had), then drop the least recently used past either bound;
        a value bigger than `max_size` alone is dropped at once."""
        self.pop(key)
        self._entries[key] = (value, size)
        self.size += size
        while self._entries and (len(self._entries) > self.max_entries or self.size > self.max_size):
            _, (_, dropped) = self._entries.popitem(last=False)
            self.size -= dropped

    def pop(self, key: K) -> V | None:
        kept = self._entries.pop(key, None)
        if kept is None:
            return None
        self.size -= kept[1]
        return kept[0]

    def clear(self) -> None:
        self._entries.clear()
        self.size = 0
