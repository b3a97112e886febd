"""Per-principal describe snapshots and the `uri -> source-id` map.

Every entry is keyed by the principal: a snapshot taken for bob is never
served to alice. A capsule-set change marks snapshots stale (they stay around
as "the previous good snapshot" so an empty round cannot wipe them); a stale
snapshot is never served without a new round first.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from astrid.host.bus import Principal
from astrid.host.contract.resource import ResourceDefinition


@dataclass(frozen=True)
class Snapshot:
    resources: tuple[ResourceDefinition, ...]
    # uri -> source-id: a listed uri is read from this owner only (docs/contract.md §5.3)
    owners: dict[str, str] = field(default_factory=dict)
    stale: bool = False
    generation: int = 0

    def owner_of(self, uri: str) -> str | None:
        return self.owners.get(uri)


class SnapshotCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshots: dict[Principal, Snapshot] = {}
        self._generations: dict[Principal, int] = {}
        self._global_generation = 0
        self._round_locks: dict[Principal, threading.Lock] = {}

    def generation(self, principal: Principal) -> int:
        with self._lock:
            return self._global_generation + self._generations.get(principal, 0)

    def get(self, principal: Principal) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(principal)

    def fresh(self, principal: Principal) -> Snapshot | None:
        with self._lock:
            snapshot = self._snapshots.get(principal)
            if snapshot is None or snapshot.stale:
                return None
            if snapshot.generation != self._global_generation + self._generations.get(principal, 0):
                return None
            return snapshot

    def store(self, principal: Principal, snapshot: Snapshot) -> None:
        with self._lock:
            current = self._global_generation + self._generations.get(principal, 0)
            if snapshot.generation != current:
                # the capsule set changed while the round ran: keep it, but stale
                snapshot = Snapshot(snapshot.resources, snapshot.owners, True, snapshot.generation)
            self._snapshots[principal] = snapshot

    def mark_stale(self, principal: Principal) -> None:
        with self._lock:
            snapshot = self._snapshots.get(principal)
            if snapshot is not None and not snapshot.stale:
                self._snapshots[principal] = Snapshot(snapshot.resources, snapshot.owners, True, snapshot.generation)

    def invalidate(self, principal: Principal | None = None) -> None:
        """A capsule-set change for `principal` (None: for everyone)."""
        with self._lock:
            if principal is None:
                self._global_generation += 1
                targets = list(self._snapshots)
            else:
                self._generations[principal] = self._generations.get(principal, 0) + 1
                targets = [principal]
            for target in targets:
                snapshot = self._snapshots.get(target)
                if snapshot is not None:
                    self._snapshots[target] = Snapshot(snapshot.resources, snapshot.owners, True, snapshot.generation)

    def round_lock(self, principal: Principal) -> threading.Lock:
        """One describe round at a time per principal (concurrent lists coalesce)."""
        with self._lock:
            lock = self._round_locks.get(principal)
            if lock is None:
                lock = self._round_locks[principal] = threading.Lock()
            return lock
