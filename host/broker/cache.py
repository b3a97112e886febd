"""Per-principal describe and templates snapshots, and their owner maps.

Every entry is keyed by the principal: a snapshot taken for bob is never
served to alice. A capsule-set change marks snapshots stale (they stay around
as "the previous good snapshot" so an empty round cannot wipe them); a stale
snapshot is never served without a new round first.

The templates snapshot (docs/contract/templates.md §9.3) lives beside the describe
snapshot and shares its generation counter: the same events invalidate both.

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
from typing import TypeVar

from astrid.host.broker.templates import TemplateRoute, pick_template, template_routes
from astrid.host.bus import Principal
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate


@dataclass(frozen=True)
class Snapshot:
    resources: tuple[ResourceDefinition, ...]
    # uri -> source-id: a listed uri is read from this owner only (docs/contract/resources.md §5.3)
    owners: dict[str, str] = field(default_factory=dict)
    stale: bool = False
    generation: int = 0
    # uri -> the max_age_s its definition declared (docs/contract/resources.md §5.7)
    max_age: dict[str, float] = field(default_factory=dict)

    def owner_of(self, uri: str) -> str | None:
        return self.owners.get(uri)


@dataclass(frozen=True)
class TemplateSnapshot:
    templates: tuple[ResourceTemplate, ...]
    # uri_template -> source-id: completions go to this owner only
    owners: dict[str, str] = field(default_factory=dict)
    stale: bool = False
    generation: int = 0
    # uri_template -> the max_age_s it declared: for every URI it serves
    max_age: dict[str, float] = field(default_factory=dict)

    def owner_of(self, uri_template: str) -> str | None:
        return self.owners.get(uri_template)

    @cached_property
    def routes(self) -> tuple[TemplateRoute, ...]:
        return template_routes(self.owners)

    def route(self, uri: str) -> TemplateRoute | None:
        """The template (and its owner) that serves an unlisted `uri`, if any."""
        return pick_template(self.routes, uri)


_Snap = TypeVar("_Snap", Snapshot, TemplateSnapshot)


class SnapshotCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: dict[Principal, Snapshot] = {}
        self._templates: dict[Principal, TemplateSnapshot] = {}
        self._generations: dict[Principal, int] = {}
        self._global_generation = 0
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

    # -- generic over both tables (the caller holds no lock) ---------------------------

    def _fresh(self, table: dict[Principal, _Snap], principal: Principal) -> _Snap | None:
        with self._lock:
            snapshot = table.get(principal)
            if snapshot is None or snapshot.stale or snapshot.generation != self._current(principal):
                return None
            return snapshot

    def _store(self, table: dict[Principal, _Snap], principal: Principal, snapshot: _Snap) -> None:
        with self._lock:
            if snapshot.generation != self._current(principal):
                # the capsule set changed while the round ran: keep it, but stale
                snapshot = replace(snapshot, stale=True)
            table[principal] = snapshot

    def _mark_stale(self, table: dict[Principal, _Snap], principal: Principal) -> None:
        with self._lock:
            snapshot = table.get(principal)
            if snapshot is not None and not snapshot.stale:
                table[principal] = replace(snapshot, stale=True)

    # -- describe snapshots -------------------------------------------------------------

    def get(self, principal: Principal) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(principal)

    def fresh(self, principal: Principal) -> Snapshot | None:
        return self._fresh(self._snapshots, principal)

    def store(self, principal: Principal, snapshot: Snapshot) -> None:
        self._store(self._snapshots, principal, snapshot)

    def mark_stale(self, principal: Principal) -> None:
        self._mark_stale(self._snapshots, principal)

    # -- templates snapshots ------------------------------------------------------------

    def get_templates(self, principal: Principal) -> TemplateSnapshot | None:
        with self._lock:
            return self._templates.get(principal)

    def fresh_templates(self, principal: Principal) -> TemplateSnapshot | None:
        return self._fresh(self._templates, principal)

    def store_templates(self, principal: Principal, snapshot: TemplateSnapshot) -> None:
        self._store(self._templates, principal, snapshot)

    def mark_templates_stale(self, principal: Principal) -> None:
        self._mark_stale(self._templates, principal)

    # -- both ---------------------------------------------------------------------------

    def invalidate(self, principal: Principal | None = None) -> None:
        """A capsule-set change for `principal` (None: for everyone): both snapshots go stale."""
        with self._lock:
            if principal is None:
                self._global_generation += 1
            else:
                self._generations[principal] = self._generations.get(principal, 0) + 1
            _stale(self._snapshots, principal)
            _stale(self._templates, principal)
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


def _stale(table: dict[Principal, _Snap], principal: Principal | None) -> None:
    """Mark `principal`'s entry (None: every entry) of `table` stale; the caller holds the lock."""
    for target in list(table) if principal is None else [principal]:
        snapshot = table.get(target)
        if snapshot is not None:
            table[target] = replace(snapshot, stale=True)
