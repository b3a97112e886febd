"""Which files each resource read touched, so that a change to one updates that resource.

While a capsule handles `resource.v1.request.read` for a principal, every
`astrid:fs` call it makes is recorded under (the capsule's source-id, the
principal, the URI of the read being served: the request's `uri`): a `read`
or `stat` records the file, a `list` the folder. A later read of the same URI
replaces what an earlier one recorded (it may look at other files). Calls
made while handling anything else (describe, completion, a custom handler)
are not recorded: they serve no one URI.

When the mount watcher reports files that changed (`touched(paths)`), every
(capsule, principal, URI) whose last read looked at one of them, or listed a
folder one of them lies beneath, is due an update (docs/contract/subscriptions.md §11).

It never crosses principals: alice's read records alice's key, and a change
announces the URI to alice only. A rebuilt or removed capsule's records are
forgotten (`forget`): its new build records its own.

`roots()` are the mount folders the recorded reads looked under: what a host
with no mount watch of its own (`astrid host run`) polls.

Bounded (`KERNEL_TUNING.tracked_*`): paths per read (the rest is not watched),
URIs per (capsule, principal) and URIs in all, the least recently read
forgotten first.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from astrid.host.bus import Principal
from astrid.host.tuning import KERNEL_TUNING

FILE = "file"
FOLDER = "folder"


@dataclass(frozen=True)
class ReadKey:
    """One URI served to one principal by one capsule build."""

    source_id: str
    principal: Principal
    uri: str


@dataclass
class _Read:
    token: object  # the call that recorded it: a new call starts the read afresh
    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    roots: set[str] = field(default_factory=set)

    def paths(self) -> int:
        return len(self.files) + len(self.folders)


class ReadTracker:
    def __init__(
        self,
        *,
        paths_per_read: int = KERNEL_TUNING.tracked_paths_per_read,
        reads_per_sandbox: int = KERNEL_TUNING.tracked_reads_per_sandbox,
        max_reads: int = KERNEL_TUNING.tracked_reads,
    ) -> None:
        self.paths_per_read = paths_per_read
        self.reads_per_sandbox = reads_per_sandbox
        self.max_reads = max_reads
        self._lock = threading.Lock()
        self._reads: OrderedDict[ReadKey, _Read] = OrderedDict()  # least recently read first
        self._sandboxes: dict[tuple[str, Principal], OrderedDict[ReadKey, None]] = {}
        self._files: dict[str, set[ReadKey]] = {}
        self._folders: dict[str, set[ReadKey]] = {}
        self._roots: Counter[str] = Counter()  # mount folder -> reads that looked under it

    def __len__(self) -> int:
        with self._lock:
            return len(self._reads)

    def record(self, key: ReadKey, token: object, path: str, kind: str, *, root: str | None = None) -> None:
        """The read `key`, in the call `token`, looked at `path` (a `FILE` or a `FOLDER`) under mount folder `root`."""
        with self._lock:
            read = self._reads.get(key)
            if read is not None and read.token != token:  # a new read of the URI: start afresh
                self._drop(key)
                read = None
            if read is None:
                read = self._reads[key] = _Read(token)
                sandbox = self._sandboxes.setdefault((key.source_id, key.principal), OrderedDict())
                sandbox[key] = None
                while len(sandbox) > self.reads_per_sandbox:
                    self._drop(next(iter(sandbox)))
                while len(self._reads) > self.max_reads:
                    self._drop(next(iter(self._reads)))
            else:
                self._reads.move_to_end(key)
                self._sandboxes[(key.source_id, key.principal)].move_to_end(key)
            if root is not None and root not in read.roots:
                read.roots.add(root)
                self._roots[root] += 1
            kept, index = (read.folders, self._folders) if kind == FOLDER else (read.files, self._files)
            if path in kept or read.paths() >= self.paths_per_read:
                return
            kept.add(path)
            index.setdefault(path, set()).add(key)

    def touched(self, paths: Iterable[str]) -> list[ReadKey]:
        """The reads that looked at one of `paths` (or listed a folder one of them lies beneath)."""
        found: set[ReadKey] = set()
        with self._lock:
            for path in paths:
                found |= self._files.get(path, set())
                if not self._folders:
                    continue
                parent = os.path.dirname(path)
                while parent and parent != path:
                    found |= self._folders.get(parent, set())
                    path, parent = parent, os.path.dirname(parent)
        return sorted(found, key=lambda key: (key.source_id, str(key.principal), key.uri))

    def roots(self) -> frozenset[str]:
        """The mount folders some recorded read looked under."""
        with self._lock:
            return frozenset(self._roots)

    def forget(self, source_id: str) -> None:
        """A capsule build is gone (rebuilt or removed): forget what its reads touched."""
        with self._lock:
            for key in [key for key in self._reads if key.source_id == source_id]:
                self._drop(key)

    def _drop(self, key: ReadKey) -> None:
        """The caller holds the lock."""
        read = self._reads.pop(key)
        sandbox = self._sandboxes.get((key.source_id, key.principal))
        if sandbox is not None:
            sandbox.pop(key, None)
            if not sandbox:
                del self._sandboxes[(key.source_id, key.principal)]
        for root in read.roots:
            self._roots[root] -= 1
            if self._roots[root] <= 0:
                del self._roots[root]
        for paths, index in ((read.files, self._files), (read.folders, self._folders)):
            for path in paths:
                keys = index.get(path)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[path]
