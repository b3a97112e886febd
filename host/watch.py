"""Hot reload's eyes: notice when the files under some folders change."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

log = logging.getLogger("astrid.host.runtime")

WATCH_INTERVAL_S = 1.0


class FolderWatcher:
    """Polls the mtimes under some folders; calls back once a change has settled.

    A change is acted on when two polls in a row agree on the new state, so a
    build that writes several files triggers one reload, not one per file.
    """

    MAX_FILES = 20_000
    _SKIP_DIRS = {"__pycache__", ".git", "node_modules", ".pytest_cache"}

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

    def signature(self) -> frozenset[tuple[str, int, int]]:
        entries: set[tuple[str, int, int]] = set()
        for root in self.paths:
            if not root.exists():
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d not in self._SKIP_DIRS and not d.startswith(".")]
                for filename in filenames:
                    if filename.endswith((".tmp", ".pyc")) or filename.startswith("."):
                        continue
                    path = os.path.join(dirpath, filename)
                    try:
                        stat = os.stat(path)
                    except OSError:
                        continue
                    entries.add((path, stat.st_mtime_ns, stat.st_size))
                    if len(entries) >= self.MAX_FILES:
                        return frozenset(entries)
        return frozenset(entries)

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
