"""The mount watcher behind live-data freshness: real folders, polled by hand and by its thread."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from astrid.host.tuning import WATCH_TUNING
from astrid.host.watch import MOUNT_LIMITS, MountWatcher, WalkLimits, walk


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


# -- bounded polls: a mount's content is not the operator's ---------------------------------


def count_listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    listed: list[str] = []
    real = os.scandir

    def counting(path: Any = ".") -> Any:
        listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", counting)
    return listed


def chain(root: Path, depth: int) -> Path:
    folder = root
    for _ in range(depth):
        folder = folder / "d"
    folder.mkdir(parents=True)
    return folder


def test_a_walk_is_breadth_first_stops_at_its_caps_and_sees_the_same_part_each_time(tmp_path: Path) -> None:
    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.md").write_text(name)
    (tmp_path / "a" / "deep").mkdir()
    (tmp_path / "a" / "deep" / "g.md").write_text("g")
    walked = walk(tmp_path, WalkLimits(files=100, folders=3))
    assert walked.folders == 3 and walked.capped == "3 folders"
    assert len(walked.files) == 2 and all(Path(p).name == "f.md" for p, _, _ in walked.files)  # breadth first
    assert walk(tmp_path, WalkLimits(files=100, folders=3)).files == walked.files  # the same part again
    walked = walk(tmp_path, WalkLimits(files=100, depth=1))
    assert walked.capped == "1 folders deep" and len(walked.files) == 3  # a/deep/g.md is beyond
    walked = walk(tmp_path, WalkLimits(files=2))
    assert walked.capped == "2 files" and len(walked.files) == 2
    walked = walk(tmp_path, WalkLimits(files=100, entries=2))
    assert walked.capped == "2 names" and walked.entries == 2 and walked.folders == 1
    walked = walk(tmp_path, WalkLimits(files=100))
    assert walked.capped is None and (walked.folders, walked.entries, len(walked.files)) == (5, 8, 4)


def test_a_huge_folder_is_read_only_up_to_the_names_cap(tmp_path: Path) -> None:
    for i in range(3_000):
        (tmp_path / f"f{i}").touch()
    walked = walk(tmp_path, WalkLimits(files=10_000, entries=500))
    assert walked.entries == 500 and len(walked.files) == 500 and walked.capped == "500 names"
    assert walk(tmp_path, WalkLimits(files=10_000, entries=500)).files == walked.files  # a stable part


def test_a_walk_skips_symlinked_folders_dot_entries_and_litter(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.md").write_text("a")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "h.md").write_text("h")
    (tmp_path / "node_modules").mkdir()
    (tmp_path / "node_modules" / "n.js").write_text("n")
    (tmp_path / "x.tmp").write_text("t")
    (tmp_path / "b.md").symlink_to(tmp_path / "real" / "a.md")  # a symlinked file counts, as before
    walked = walk(tmp_path, MOUNT_LIMITS)
    assert sorted(Path(p).name for p, _, _ in walked.files) == ["a.md", "b.md"]
    assert walked.folders == 2


def test_a_mount_is_walked_within_its_caps_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mount = tmp_path / "mount"
    for i in range(50):
        (mount / f"d{i:02}").mkdir(parents=True)
    reports: list[frozenset[str]] = []
    watcher = MountWatcher(lambda: {mount: frozenset({"alice"})}, reports.append, 60, limits=WalkLimits(10, folders=20))
    listed = count_listings(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="astrid.host.runtime"):
        for _ in range(3):
            watcher.poll()
    assert len(listed) == 3 * 20
    (line,) = [r.getMessage() for r in caplog.records if "mount folder" in r.getMessage()]
    assert str(mount) in line and "20 folders" in line and "reads still see them" in line
    watched = {Path(p).name for p in listed} - {"mount"}
    assert len(watched) == 19  # the same 19 of the 50 on every poll
    (mount / min(watched) / "seen.md").write_text("within the cap")
    watcher.poll()
    assert reports == [frozenset({"alice"})]
    unwatched = {f"d{i:02}" for i in range(50)} - watched
    (mount / min(unwatched) / "unseen.md").write_text("beyond the cap")
    watcher.poll()
    assert len(reports) == 1  # not announced: a read still sees it


def test_a_deep_chain_costs_only_the_depth_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mount = tmp_path / "mount"
    chain(mount, 200)
    watcher = MountWatcher(lambda: {mount: frozenset({"alice"})}, lambda users: None, 60)
    listed = count_listings(monkeypatch)
    watcher.poll()
    assert len(listed) == WATCH_TUNING.mount_max_depth + 1  # the root and 16 below it


def test_a_poll_over_many_mounts_stops_at_its_budget_and_every_mount_gets_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mounts = [tmp_path / f"m{i}" for i in range(6)]
    for mount in mounts:
        for j in range(9):
            (mount / f"d{j}").mkdir(parents=True)  # 10 folders each with the root
    targets = {mount: frozenset({mount.name}) for mount in mounts}
    reports: list[frozenset[str]] = []
    watcher = MountWatcher(lambda: targets, reports.append, 60, poll_folders=25, poll_entries=1000)
    listed = count_listings(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="astrid.host.runtime"):
        watcher.poll()  # m0, m1, m2: 30 folders, the budget (25) overdrawn by the last mount only
        assert len(listed) == 30
        watcher.poll()  # m3, m4, m5: the ones not walked yet go first
        assert len(listed) == 60
        assert reports == []  # baselines
        (mounts[5] / "d0" / "new.md").write_text("x")
        (mounts[0] / "d0" / "new.md").write_text("x")
        watcher.poll()  # m0, m1, m2 again
        watcher.poll()  # m3, m4, m5
    assert reports == [frozenset({"m0"}), frozenset({"m5"})]  # each seen on its turn, none lost
    assert len(listed) == 120
    deferred = [r.getMessage() for r in caplog.records if "wait for a later poll" in r.getMessage()]
    assert len(deferred) == 1 and "3 of 6" in deferred[0]


def test_it_names_the_files_that_changed_before_it_reports_the_users(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("a")
    (notes / "gone.md").write_text("gone")
    (notes / "same.md").write_text("same")
    calls: list[tuple[str, Any]] = []
    watcher = MountWatcher(
        lambda: {notes: frozenset({"alice"})},
        lambda users: calls.append(("users", users)),
        interval_s=60,
        on_files=lambda paths: calls.append(("files", paths)),
    )
    watcher.poll()
    (notes / "a.md").write_text("a, longer now")
    (notes / "gone.md").unlink()
    (notes / "new.md").write_text("new")
    watcher.poll()
    expected = frozenset(os.path.join(str(notes), name) for name in ("a.md", "gone.md", "new.md"))
    assert calls == [("files", expected), ("users", frozenset({"alice"}))]
    watcher.poll()
    assert len(calls) == 2  # nothing more changed


def test_a_failing_file_callback_does_not_stop_the_list_news(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    users: list[Any] = []

    def broken(paths: frozenset[str]) -> None:
        raise RuntimeError("no")

    watcher = MountWatcher(lambda: {notes: frozenset({"alice"})}, users.append, interval_s=60, on_files=broken)
    watcher.poll()
    (notes / "a.md").write_text("a")
    watcher.poll()
    assert users == [frozenset({"alice"})]


def test_a_folder_first_wanted_since_the_last_poll_names_the_files_modified_since_the_poll_before(
    tmp_path: Path,
) -> None:
    """A read looked under a folder (or a principal's mount is new) between two polls: a file it changed
    before the folder's first walk is named, or the change would vanish into the baseline; older files not."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "old.md").write_text("old")
    long_ago = os.stat(notes / "old.md").st_mtime - 3600
    os.utime(notes / "old.md", (long_ago, long_ago))
    targets: dict[Path, frozenset[str]] = {}
    calls: list[tuple[str, Any]] = []
    watcher = MountWatcher(
        lambda: targets,
        lambda users: calls.append(("users", users)),
        interval_s=60,
        on_files=lambda paths: calls.append(("files", paths)),
    )
    watcher.poll()  # the folder is nobody's yet
    targets[notes] = frozenset({"alice"})  # a read looks under it ...
    (notes / "today.md").write_text("changed after the read")  # ... and the file changes before the next poll
    watcher.poll()
    assert calls == [("files", frozenset({os.path.join(str(notes), "today.md")}))]  # the list news: none
    watcher.poll()
    assert len(calls) == 1  # named once


def test_the_first_poll_is_the_baseline_of_every_folder(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "today.md").write_text("written just before the start")
    files: list[frozenset[str]] = []
    watcher = MountWatcher(lambda: {notes: frozenset({"alice"})}, lambda users: None, 60, on_files=files.append)
    watcher.poll()
    watcher.poll()
    assert files == []
