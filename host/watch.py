"""Hot reload's eyes: notice when the files under some folders change.

`FolderWatcher` watches the capsule folders (a rebuild reloads the capsule);
`MountWatcher` watches the folders granted to capsules as fs mounts (a change
there makes the capsules' resource lists stale for the principals using them);
`ValueWatcher` polls any cheap value, e.g. what the loaded capsules are
granted (a grant or a revoke makes their lists stale, with no reload).

A mount's content is not the operator's: whoever writes into it decides its
shape, so each poll of a mount is bounded (`MOUNT_LIMITS`): at most so many
folders listed and names read per mount, so deep, and so many per poll over
all mounts. What lies beyond a cap is not watched (logged once per folder): a
read still sees it as it is, only the resource list is not described again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from astrid.host.tuning import WATCH_TUNING

log = logging.getLogger("astrid.host.runtime")
# What a person running a server wants to see by default (the CLI shows it as `astrid: ...` lines).
events = logging.getLogger("astrid.events")
V = TypeVar("V")

_SKIP_DIRS = {"__pycache__", ".git", "node_modules", ".pytest_cache"}

TreeSignature = frozenset[tuple[str, int, int]]


@dataclass(frozen=True)
class WalkLimits:
    """How much of a tree one walk may look at: files in the signature, folders
    listed, names read (of any kind) and folders deep; None is no cap."""

    files: int
    folders: int | None = None
    entries: int | None = None
    depth: int | None = None


CAPSULE_LIMITS = WalkLimits(files=WATCH_TUNING.capsule_max_files)  # capsule folders are the operator's own
# The mount watcher's caps (their costs: WatchTuning). Every file read is a name
# read, so the names cap is the files cap as well.
MOUNT_LIMITS = WalkLimits(
    files=WATCH_TUNING.mount_max_entries,
    folders=WATCH_TUNING.mount_max_folders,
    entries=WATCH_TUNING.mount_max_entries,
    depth=WATCH_TUNING.mount_max_depth,
)


@dataclass
class Walk:
    """What a walk saw: the (path, mtime, size) of its files, how many folders it
    listed and names it read, and the cap it hit (None: it saw everything)."""

    files: set[tuple[str, int, int]]
    folders: int = 0
    entries: int = 0
    capped: str | None = None


def walk(root: Path, limits: WalkLimits, into: Walk | None = None) -> Walk:
    """The files under `root`, breadth first, within `limits` (dot-names, build
    litter and symlinked folders skipped). Listings are read in the order the
    file system gives, which is stable while a folder is unchanged, so a capped
    walk of an unchanged tree sees the same part of it every time."""
    seen = into if into is not None else Walk(set())
    if not root.is_dir():
        return seen
    level: list[str] = [str(root)]
    depth = 0
    while level:
        below: list[str] = []
        for folder in level:
            if limits.folders is not None and seen.folders >= limits.folders:
                seen.capped = f"{limits.folders} folders"
                return seen
            seen.folders += 1
            try:
                with os.scandir(folder) as listing:
                    for item in listing:
                        if limits.entries is not None and seen.entries >= limits.entries:
                            seen.capped = f"{limits.entries} names"
                            return seen
                        seen.entries += 1
                        if not _look_at(item, depth, limits, seen, below):
                            return seen
            except OSError:  # gone or unreadable: nothing to see there
                continue
        level = below
        depth += 1
    return seen


def _look_at(item: os.DirEntry[str], depth: int, limits: WalkLimits, seen: Walk, below: list[str]) -> bool:
    """Note the file or queue the folder `item` (at `depth` + 1); False once the files cap is reached."""
    name = item.name
    if name.startswith("."):
        return True
    try:
        if item.is_dir(follow_symlinks=False):
            if name in _SKIP_DIRS:
                return True
            if limits.depth is not None and depth >= limits.depth:
                seen.capped = seen.capped or f"{limits.depth} folders deep"
                return True
            below.append(item.path)
        elif item.is_file() and not name.endswith((".tmp", ".pyc")):
            status = item.stat()
            seen.files.add((item.path, status.st_mtime_ns, status.st_size))
            if len(seen.files) >= limits.files:
                seen.capped = f"{limits.files} files"
                return False
    except OSError:  # vanished between the listing and the stat: the next poll sees it gone
        return True
    return True


def tree_signature(roots: Iterable[Path], limits: WalkLimits = CAPSULE_LIMITS) -> TreeSignature:
    """(path, mtime, size) of the files under `roots` (dot-files and build litter
    skipped, within `limits`, by default at most `WATCH_TUNING.capsule_max_files`): what any edit changes."""
    seen = Walk(set())
    for root in roots:
        walk(root, limits, seen)
        if len(seen.files) >= limits.files:
            break
    return frozenset(seen.files)


def _file_marks(files: Iterable[Path]) -> TreeSignature:
    marks = set()
    for path in files:
        try:
            status = path.stat()
        except OSError:
            continue
        marks.add((str(path), status.st_mtime_ns, status.st_size))
    return frozenset(marks)


class FolderWatcher:
    """Polls the mtimes under some folders; calls back once a change has settled.

    A change is acted on when two polls in a row agree on the new state, so a
    build that writes several files triggers one reload, not one per file.
    """

    def __init__(
        self, paths: Iterable[Path], on_change: Callable[[], None], interval_s: float, *, files: Iterable[Path] = ()
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.files = [Path(f) for f in files]  # single files watched too (the trust file)
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
        return tree_signature(self.paths) | _file_marks(self.files)

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


class ValueWatcher(Generic[V]):
    """Polls `probe()` every `interval_s`; calls `on_change(before, after)` when its value differs.

    Meant for values that are cheap to get and change as a whole (what the
    loaded capsules are granted: a grants file is replaced atomically), so a
    change is acted on at the first poll that sees it. A probe that raises is
    logged, once per distinct error, and tried again at the next poll."""

    def __init__(self, probe: Callable[[], V], on_change: Callable[[V, V], None], interval_s: float) -> None:
        self.probe = probe
        self.on_change = on_change
        self.interval_s = interval_s
        self._value: V | None = None
        self._failure: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="astrid-value-watch", daemon=True)

    def start(self) -> None:
        try:
            self._value = self.probe()  # the baseline, before start() returns
        except Exception as exc:  # no baseline: the first value that comes is a change
            self._failure = str(exc)
            log.warning("watch failed (still watching): %s", exc)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def poll(self) -> None:
        try:
            value = self.probe()
        except Exception as exc:
            if str(exc) != self._failure:
                self._failure = str(exc)
                log.warning("watch failed (still watching): %s", exc)
            return
        self._failure = None
        before, self._value = self._value, value
        if value != before:
            self.on_change(before, value)  # type: ignore[arg-type]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:
                log.exception("watch callback failed; still watching")


class MountWatcher:
    """Polls the folders capsules read as fs mounts; reports who uses a folder that changed.

    `mounts()` says, on every poll, which folders to watch and for whom (the
    kernel's granted mounts per watched principal, so a grant, a revoke or a
    new principal is picked up without a restart); `on_change(users)` gets
    the union of the users of the folders that changed since the last poll.
    A folder seen for the first time is only a baseline for `on_change`.

    Each poll is bounded: a mount is walked within `limits` (what lies beyond
    is not watched, logged once per folder), and once a poll has listed
    `poll_folders` folders or read `poll_entries` names, the mounts not walked
    yet keep their last signature and go first in the next poll (the least
    recently walked first, so every mount gets its turn).

    A granted folder that does not exist (or is no folder) is named once on
    the `astrid.events` log, and again only if it comes and goes.
    `last_changed` holds the folders behind the latest `on_change`.

    `on_files(paths)` (optional) gets the files that changed since the last
    poll (new, gone, or with a new mtime or size), before `on_change`: the
    kernel announces the resources whose reads touched them. A folder wanted
    since the last poll (a new principal's mount, or the first read that
    looked under it) has no earlier poll to compare with: its files modified
    since the poll before it was wanted (less `new_folder_lookback_s`) are
    named, so a change between a read and the folder's first poll is not lost
    (docs/contract/subscriptions.md §11.2).
    """

    def __init__(
        self,
        mounts: Callable[[], Mapping[Path, frozenset[Any]]],
        on_change: Callable[[frozenset[Any]], None],
        interval_s: float,
        *,
        limits: WalkLimits = MOUNT_LIMITS,
        poll_folders: int = WATCH_TUNING.poll_max_folders,
        poll_entries: int = WATCH_TUNING.poll_max_entries,
        on_files: Callable[[frozenset[str]], Any] | None = None,
    ) -> None:
        self.mounts = mounts
        self.on_change = on_change
        self.on_files = on_files
        self.interval_s = interval_s
        self.limits = limits
        self.poll_folders = poll_folders
        self.poll_entries = poll_entries
        self._seen: dict[Path, TreeSignature] = {}
        self._walked_at: dict[Path, int] = {}  # the poll that last walked each folder
        self._polls = 0
        self._polled_ns: int | None = None  # when the last poll started (wall clock, as mtimes are)
        self._wanted_since: dict[Path, int] = {}  # a folder not walked yet: mtimes from here on are news
        self._capped_logged: set[Path] = set()
        self._missing_logged: set[Path] = set()
        self.last_changed: frozenset[Path] = frozenset()
        self._deferred_logged = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="astrid-mount-watch", daemon=True)

    def start(self) -> None:
        self.poll()  # the baseline, before start() returns
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def poll(self) -> None:
        started_ns = time.time_ns()
        targets = self.mounts()
        self._polls += 1
        if self._polled_ns is not None:  # the first poll (start) is the baseline of everything
            lookback_ns = int(WATCH_TUNING.new_folder_lookback_s * 1e9)
            for folder in targets.keys() - self._seen.keys() - self._wanted_since.keys():
                self._wanted_since[folder] = self._polled_ns - lookback_ns
        changed: set[Any] = set()
        changed_folders: set[Path] = set()
        changed_files: set[str] = set()
        seen: dict[Path, TreeSignature] = {}
        folders = entries = 0
        deferred: list[Path] = []
        for folder in sorted(targets, key=lambda f: self._walked_at.get(f, -1)):
            if folders >= self.poll_folders or entries >= self.poll_entries:
                deferred.append(folder)
                if folder in self._seen:  # not looked at this time: no news, keep the baseline
                    seen[folder] = self._seen[folder]
                continue
            walked = walk(folder, self.limits)
            folders, entries = folders + walked.folders, entries + walked.entries
            self._walked_at[folder] = self._polls
            self._note_missing(folder, walked)
            if walked.capped and folder not in self._capped_logged:
                self._capped_logged.add(folder)
                log.warning(
                    "the mount folder %s holds more than the watcher looks at (%s): changes beyond that "
                    "are not announced, reads still see them",
                    folder,
                    walked.capped,
                )
            seen[folder] = frozenset(walked.files)
            before = self._seen.get(folder)
            if before is not None and before != seen[folder]:
                changed |= targets[folder]
                changed_folders.add(folder)
                changed_files.update(path for path, _, _ in before ^ seen[folder])
            wanted_at = self._wanted_since.pop(folder, None)
            if before is None and wanted_at is not None:
                changed_files.update(path for path, mtime_ns, _ in walked.files if mtime_ns >= wanted_at)
        if deferred and not self._deferred_logged:
            self._deferred_logged = True
            log.warning(
                "the mount folders hold more than one poll looks at (%d folders, %d names): %d of %d wait "
                "for a later poll, so their changes are announced later",
                self.poll_folders,
                self.poll_entries,
                len(deferred),
                len(targets),
            )
        self._seen = seen
        self._walked_at = {folder: self._walked_at[folder] for folder in targets if folder in self._walked_at}
        self._capped_logged &= targets.keys()  # forget dropped folders (one per principal can come and go)
        self._missing_logged &= targets.keys()
        self._wanted_since = {folder: at for folder, at in self._wanted_since.items() if folder in targets}
        self._polled_ns = started_ns
        if changed_files and self.on_files is not None:
            try:
                self.on_files(frozenset(changed_files))
            except Exception:  # the list changes are still announced
                log.exception("announcing the changed files failed")
        if changed:
            self.last_changed = frozenset(changed_folders)
            self.on_change(frozenset(changed))

    def _note_missing(self, folder: Path, walked: Walk) -> None:
        """Name a granted folder that is not there, once (a walk lists a folder it can open first)."""
        if walked.folders:  # there (an unreadable one is listed as empty, and said by the capsule)
            self._missing_logged.discard(folder)
        elif folder not in self._missing_logged:
            self._missing_logged.add(folder)
            what = "is not a folder" if folder.exists() else "does not exist"
            events.warning(
                "the folder %s, granted to a capsule as an fs mount, %s: nothing is served from it until it is "
                "there (`astrid grants list` shows the grants)",
                folder,
                what,
                extra={"event": "mount_missing", "fields": {"folder": str(folder)}},
            )

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll()
            except Exception:
                log.exception("mount watch failed; still watching")
