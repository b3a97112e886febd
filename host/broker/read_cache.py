"""Declared freshness: reads a capsule lets the broker serve again for a while.

A resource, family member or template may declare `max_age_s` in its `meta`,
under the `astrid` key (`{"astrid": {"max_age_s": 60}}`; the guest SDK writes
it from `@capsule.resource(..., max_age_s=60)`). The broker then keeps a
successful read for that long (docs/contract/resources.md §5.7):

- an entry is keyed by (principal, uri, owner source-id): it never crosses
  principals, and a rebuilt owner (a new source-id) never sees its old
  build's entries;
- only a successful read is kept, never a failure, and nothing is kept for a
  URI whose owner declared no `max_age_s`;
- a capsule-set change for a principal (or for everyone), and an explicit
  refresh, drop that principal's entries; a read that overlapped the drop is
  not stored (`epoch`);
- an update of a URI (its owner announced a change, docs/contract/subscriptions.md §11)
  drops that principal's entries of that URI, before anyone is told, and a
  read of the principal's that overlapped the drop is not stored either;
- the cache is bounded by entries and by bytes, least recently used first.

`split_freshness` takes the `astrid` key out of the definitions the broker
hands out (it is for the host, not `_meta` for clients) and keeps the value.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from astrid.host.bounded_lru import BoundedLru
from astrid.host.bus import Principal
from astrid.host.contract.outcomes import ReadOutcome
from astrid.host.contract.resource import BlobChunk, TextChunk
from astrid.host.tuning import BROKER_TUNING

ASTRID_META_KEY = "astrid"
MAX_AGE_KEY = "max_age_s"
MAX_AGE_CAP_S = 86_400.0  # one day: a longer declaration is cut to this
_ENTRY_OVERHEAD = 256  # bytes counted per entry and per chunk besides the content

Clock = Callable[[], float]


class _Described(Protocol):
    @property
    def meta(self) -> str | None: ...

    def model_copy(self, *, update: dict[str, object] | None = None, deep: bool = False) -> _Described: ...


_Item = TypeVar("_Item", bound=_Described)


def declared_max_age(meta: dict[str, object]) -> float | None:
    """`meta["astrid"]["max_age_s"]` when it is a positive finite number (capped), else None."""
    section = meta.get(ASTRID_META_KEY)
    if not isinstance(section, dict):
        return None
    value = section.get(MAX_AGE_KEY)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value) or value <= 0:
        return None
    return min(float(value), MAX_AGE_CAP_S)


def split_freshness(items: Iterable[_Item], key: Callable[[_Item], str]) -> tuple[tuple[_Item, ...], dict[str, float]]:
    """The items without their `astrid` meta key, and `key(item) -> max_age_s` for those that declared one.

    An item whose meta has no `astrid` key is returned as it is (the same object).
    """
    kept: list[_Item] = []
    ages: dict[str, float] = {}
    for item in items:
        meta = item.meta
        if meta is None or ASTRID_META_KEY not in meta:
            kept.append(item)
            continue
        try:
            decoded = json.loads(meta)
        except (ValueError, RecursionError):
            kept.append(item)
            continue
        if not isinstance(decoded, dict) or ASTRID_META_KEY not in decoded:
            kept.append(item)
            continue
        age = declared_max_age(decoded)
        if age is not None:
            ages[key(item)] = age
        rest = {k: v for k, v in decoded.items() if k != ASTRID_META_KEY}
        stripped = json.dumps(rest, separators=(",", ":"), ensure_ascii=False) if rest else None
        kept.append(item.model_copy(update={"meta": stripped}))  # type: ignore[arg-type]
    return tuple(kept), ages


def _size(uri: str, contents: tuple[TextChunk | BlobChunk, ...]) -> int:
    total = _ENTRY_OVERHEAD + len(uri)
    for chunk in contents:
        total += _ENTRY_OVERHEAD + (len(chunk.text) if isinstance(chunk, TextChunk) else len(chunk.blob))
    return total


@dataclass(frozen=True)
class _Entry:
    contents: tuple[TextChunk | BlobChunk, ...]
    source_id: str
    expires: float


_Key = tuple[Principal, str, str]  # (principal, uri, owner source-id)


class ReadCache:
    """Successful reads kept for their declared `max_age_s`; bounded, LRU, per principal."""

    def __init__(
        self,
        *,
        max_entries: int = BROKER_TUNING.read_cache_entries,
        max_bytes: int = BROKER_TUNING.read_cache_bytes,
        clock: Clock = time.monotonic,
    ) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: BoundedLru[_Key, _Entry] = BoundedLru(max_entries, max_bytes)
        self._epochs: dict[Principal, int] = {}
        self._global_epoch = 0
        self.hits = 0
        self.stores = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def bytes(self) -> int:
        with self._lock:
            return self._entries.size

    def epoch(self, principal: Principal) -> int:
        """Take before a read; `store` refuses the result if the principal's entries were dropped since."""
        with self._lock:
            return self._global_epoch + self._epochs.get(principal, 0)

    def get(self, principal: Principal, uri: str, owner: str) -> ReadOutcome | None:
        """The kept read, with the seconds it stays fresh, or None."""
        key = (principal, uri, owner)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            left = entry.expires - self._clock()
            if left <= 0:
                self._entries.pop(key)
                return None
            self.hits += 1
        return ReadOutcome(contents=entry.contents, source_id=entry.source_id, max_age_s=left)

    def store(
        self, principal: Principal, uri: str, owner: str, outcome: ReadOutcome, max_age_s: float, epoch: int
    ) -> bool:
        """Keep a successful read of `owner` for `max_age_s`; False when it is not kept."""
        if outcome.error is not None or not outcome.contents or outcome.source_id != owner or max_age_s <= 0:
            return False
        size = _size(uri, outcome.contents)
        if size > self.max_bytes or self.max_entries <= 0:
            return False
        key = (principal, uri, owner)
        with self._lock:
            if self._global_epoch + self._epochs.get(principal, 0) != epoch:
                return False  # dropped while the read ran: what it read may be of the old capsule set
            entry = _Entry(outcome.contents, owner, self._clock() + min(max_age_s, MAX_AGE_CAP_S))
            self._entries.put(key, entry, size)
            self.stores += 1
        return True

    def invalidate(self, principal: Principal | None = None) -> None:
        """Drop `principal`'s entries (None: everyone's)."""
        with self._lock:
            if principal is None:
                self._global_epoch += 1
                self._entries.clear()
                return
            self._epochs[principal] = self._epochs.get(principal, 0) + 1
            for key in self._entries.keys():
                if key[0] == principal:
                    self._entries.pop(key)

    def invalidate_uri(self, principal: Principal, uri: str) -> None:
        """Drop `principal`'s entries of `uri` (whichever owner kept them); a read of the
        principal's running now is not stored (it may have read the old content)."""
        with self._lock:
            self._epochs[principal] = self._epochs.get(principal, 0) + 1
            for key in self._entries.keys():
                if key[0] == principal and key[1] == uri:
                    self._entries.pop(key)
