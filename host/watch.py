"""Hot reload's eyes: notice when the files under some folders change.

`FolderWatcher` watches the capsule folders (a rebuild reloads the capsule);
`MountWatcher` watches the folders granted to capsules as fs mounts (a change
there makes the capsules' resource lists stale for the principals using them).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("astrid.host.runtime")

WATCH_INTERVAL_S = 1.0
MAX_FILES = 20_000
_SKIP_DIRS = {"__pycache__", ".git", "node_modules", ".pytest_cache"}

TreeSignature = frozenset[tuple[str, int, int]]


def tree_signature(roots: Iterable[Path]) -> TreeSignature:
    """(path, mtime, size) of the files under `roots` (dot-files and build litter
    skipped, at most MAX_FILES): what any edit changes."""
    entries: set[tuple[str, int, int]] = set()
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")]
            for filename in filenames:
                if filename.endswith((".tmp", ".pyc")) or filename.startswith("."):
                    continue
                path = os.path.join(dirpath, filename)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                entries.add((path, stat.st_mtime_ns, stat.st_size))
                if len(entries) >= MAX_FILES:
                    return frozenset(entries)
    return frozenset(entries)


class FolderWatcher:
    """Polls the mtimes under some folders; calls back once a change has settled.

    A change is acted on when two polls in a row agree on the new state, so a
    build that writes several files triggers one reload, not one per file.
    """

    def __init__(self, paths: Iterable[Path], on_change: Callable[[], None], interval_s: float) -> None:
        self.paths = [Path(p) for p in paths]
        self.on_change = on_change
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="astrid-watch", daemon=True)
        self._current: frozenset[tuple[str, int, int]] = frozenset()
        self.reloads = 0

    def start(self) -> None:
        # The baseline is taken before start() returns: a change made right
        # after "watching" is announced must differ from it, not become it.
        self._current = self.signature()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def signature(self) -> TreeSignature:
        return tree_signature(self.paths)

    def _run(self) -> None:
        current = self._current
        pending: frozenset[tuple[str, int, int]] | None = None
        while not self._stop.wait(self.interval_s):
            try:
                seen = self.signature()
                if seen == current:
                    pending = None
                    continue
                if pending is None or seen != pending:
                    pending = seen  # changed; wait for it to settle
                    continue
                current, pending = seen, None
                self.reloads += 1
                self.on_change()
            except Exception:
                log.exception("capsule folder watch failed; still watching")


class MountWatcher:
    """Polls the folders capsules read as fs mounts; reports who uses a folder that changed.

    `mounts()` says, on every poll, which folders to watch and for whom (the
    kernel's granted mounts per watched principal, so a grant, a revoke or a
    new principal is picked up without a restart); `on_change(users)` gets
    the union of the users of the folders that changed since the last poll.
    A folder seen for the first time is only a baseline.
    """

    def __init__(
        self,
        mounts: Callable[[], Mapping[Path, frozenset[Any]]],
        on_change: Callable[[frozenset[Any]], None],
        interval_s: float,
    ) -> None:
        self.mounts = mounts
        self.on_change = on_change
        self.interval_s = interval_s
        self._seen: dict[Path, TreeSignature] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="astrid-mount-watch", daemon=True)

    def start(self) -> None:
        self.poll()  # the baseline, before start() returns
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def poll(self) -> None:
        targets = self.mounts()
        changed: set[Any] = set()
        seen: dict[Path, TreeSignature] = {}
        for folder, users in targets.items():
            seen[folder] = tree_signature([folder])
            before = self._seen.get(folder)
            if before is not None and before != seen[folder]:
                changed |= users
        self._seen = seen
        if changed:
            self.on_change(frozenset(changed))

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:
                log.exception("mount watch failed; still watching")
