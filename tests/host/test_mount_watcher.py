"""The mount watcher behind live-data freshness: real folders, polled by hand and by its thread."""

from __future__ import annotations

import threading
from pathlib import Path

from astrid.host.watch import MountWatcher


def test_it_reports_the_users_of_the_folders_that_changed_and_only_them(tmp_path: Path) -> None:
    notes, photos = tmp_path / "notes", tmp_path / "photos"
    notes.mkdir()
    photos.mkdir()
    targets = {notes: frozenset({"alice", "bob"}), photos: frozenset({"carol"})}
    reports: list[frozenset[str]] = []
    watcher = MountWatcher(lambda: targets, reports.append, interval_s=60)
    watcher.poll()  # the baseline
    watcher.poll()
    assert reports == []  # nothing changed
    (notes / "today.md").write_text("# Today")
    watcher.poll()
    assert reports == [frozenset({"alice", "bob"})]
    watcher.poll()
    assert len(reports) == 1  # reported once


def test_a_folder_seen_first_is_a_baseline_and_a_dropped_one_is_forgotten(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    targets: dict[Path, frozenset[str]] = {}
    reports: list[frozenset[str]] = []
    watcher = MountWatcher(lambda: targets, reports.append, interval_s=60)
    watcher.poll()
    (folder / "a.md").write_text("a")
    targets[folder] = frozenset({"alice"})  # granted now: what is there is the baseline
    watcher.poll()
    assert reports == []
    del targets[folder]
    (folder / "b.md").write_text("b")
    watcher.poll()
    targets[folder] = frozenset({"alice"})  # granted again: a new baseline, not a change
    watcher.poll()
    assert reports == []


def test_its_thread_sees_a_file_added_after_start(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    fired = threading.Event()
    watcher = MountWatcher(lambda: {folder: frozenset({"alice"})}, lambda users: fired.set(), interval_s=0.05)
    watcher.start()
    try:
        (folder / "new.md").write_text("# New")  # right after start: compared with the baseline start() took
        assert fired.wait(10)
    finally:
        watcher.stop()
