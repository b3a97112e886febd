"""Per-principal describe and templates snapshots, and their owner maps.

Every entry is keyed by the principal: a snapshot taken for bob is never
served to alice. A capsule-set change marks snapshots stale (they stay around
as "the previous good snapshot" so an empty round cannot wipe them); a stale
snapshot is never served without a new round first.

The templates snapshot (docs/contract/templates.md §9.3) lives beside the describe
snapshot and shares its generation counter: the same events invalidate both.
Both are a `Kept` snapshot, each kind kept in its own `Slots` (`cache.resources`,
`cache.templates`) under the cache's one lock.

Each snapshot also keeps the freshness its entries declared (`max_age`, from
their `meta`'s `astrid` key, which the broker strips before storing them).
Whoever keeps reads by that freshness (the broker's `ReadCache`) registers
with `on_invalidate` and is told of every capsule-set change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Generic, TypeVar

from astrid.host.broker.templates import TemplateRoute, pick_template, template_routes
from astrid.host.bus import Principal
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.telemetry import metrics

Item = TypeVar("Item")


@dataclass(frozen=True)
class Kept(Generic[Item]):
    """One principal's snapshot of one listing: what a round merged, and who owns each key."""

    items: tuple[Item, ...]
    # key -> source-id: a listed uri is read from this owner only (docs/contract/resources.md §5.3),
    # a template's completions go to this owner only
    owners: dict[str, str] = field(default_factory=dict)
    stale: bool = False
    generation: int = 0
    # key -> the max_age_s its entry declared (docs/contract/resources.md §5.7): for a
    # template, for every URI it serves
    max_age: dict[str, float] = field(default_factory=dict)

    def owner_of(self, key: str) -> str | None:
        return self.owners.get(key)


class Snapshot(Kept[ResourceDefinition]):
    """A principal's describe snapshot, keyed by `uri`."""

    @property
    def resources(self) -> tuple[ResourceDefinition, ...]:
        return self.items


class TemplateSnapshot(Kept[ResourceTemplate]):
    """A principal's templates snapshot, keyed by `uri_template`, and the routing table it makes."""

    @property
    def templates(self) -> tuple[ResourceTemplate, ...]:
        return self.items

    @cached_property
    def routes(self) -> tuple[TemplateRoute, ...]:
        return template_routes(self.owners)

    def route(self, uri: str) -> TemplateRoute | None:
        """The template (and its owner) that serves an unlisted `uri`, if any."""
        return pick_template(self.routes, uri)


_Snap = TypeVar("_Snap", bound=Kept[Any])


class Slots(Generic[_Snap]):
    """One kind of snapshot, one per principal, under its cache's lock and generations."""

    def __init__(
        self, lock: threading.Lock, current: Callable[[Principal], int], make: type[_Snap], metric: str | None
    ) -> None:
        self._lock = lock  # the cache's: shared with the other kind and the generations
        self._current = current  # the principal's generation; called with the lock held
        self._table: dict[Principal, _Snap] = {}
        self.make = make  # the snapshot type
        self._metric = metric  # the cache metric a lookup counts under (None: not counted)

    def counted(self, hit: bool) -> None:
        """A lookup of a fresh snapshot (`--metrics`: `astrid_cache_total`)."""
        if self._metric is not None:
            metrics.cache(self._metric, hit)

    def get(self, principal: Principal) -> _Snap | None:
        """The principal's snapshot, fresh or not (the previous good one when stale)."""
        with self._lock:
            return self._table.get(principal)

    def fresh(self, principal: Principal) -> _Snap | None:
        """The principal's snapshot when it may be served without a new round."""
        with self._lock:
            snapshot = self._table.get(principal)
            if snapshot is None or snapshot.stale or snapshot.generation != self._current(principal):
                return None
            return snapshot

    def store(self, principal: Principal, snapshot: _Snap) -> None:
        with self._lock:
            if snapshot.generation != self._current(principal):
                # the capsule set changed while the round ran: keep it, but stale
                snapshot = replace(snapshot, stale=True)
            self._table[principal] = snapshot

    def mark_stale(self, principal: Principal) -> None:
        with self._lock:
            snapshot = self._table.get(principal)
            if snapshot is not None and not snapshot.stale:
                self._table[principal] = replace(snapshot, stale=True)

    def stale_locked(self, principal: Principal | None) -> None:
        """Mark `principal`'s snapshot (None: everyone's) stale; the caller holds the lock."""
        for target in list(self._table) if principal is None else [principal]:
            snapshot = self._table.get(target)
            if snapshot is not None:
                self._table[target] = replace(snapshot, stale=True)


class SnapshotCache:
    """The describe snapshots (`resources`) and the templates snapshots (`templates`), per principal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._generations: dict[Principal, int] = {}
        self._global_generation = 0
        self.resources: Slots[Snapshot] = Slots(self._lock, self._current, Snapshot, "snapshot")
        self.templates: Slots[TemplateSnapshot] = Slots(self._lock, self._current, TemplateSnapshot, None)
        self._round_locks: dict[tuple[str, Principal], threading.Lock] = {}
        self._listeners: list[Callable[[Principal | None], None]] = []

    def on_invalidate(self, listener: Callable[[Principal | None], None]) -> None:
        """Call `listener(principal)` (None: everyone) after every `invalidate`."""
        with self._lock:
            self._listeners.append(listener)

    def _current(self, principal: Principal) -> int:
        return self._global_generation + self._generations.get(principal, 0)

    def generation(self, principal: Principal) -> int:
        with self._lock:
            return self._current(principal)

    def slots(self, kind: str) -> Slots[Any]:
        """Where a round of `kind` ("describe", "templates") keeps its snapshots."""
        return self.resources if kind == "describe" else self.templates

    def get(self, principal: Principal) -> Snapshot | None:
        """The principal's describe snapshot, fresh or not (`resources.get`)."""
        return self.resources.get(principal)

    def invalidate(self, principal: Principal | None = None) -> None:
        """A capsule-set change for `principal` (None: for everyone): both snapshots go stale."""
        with self._lock:
            if principal is None:
                self._global_generation += 1
            else:
                self._generations[principal] = self._generations.get(principal, 0) + 1
            self.resources.stale_locked(principal)
            self.templates.stale_locked(principal)
            listeners = list(self._listeners)
        for listener in listeners:
            listener(principal)

    def round_lock(self, principal: Principal, kind: str = "describe") -> threading.Lock:
        """One round of a kind at a time per principal (concurrent lists coalesce)."""
        with self._lock:
            key = (kind, principal)
            lock = self._round_locks.get(key)
            if lock is None:
                lock = self._round_locks[key] = threading.Lock()
            return lock
