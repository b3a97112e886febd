"""Which files a resource read touched (`kernel.file_tracking.ReadTracker`), and what a change updates."""

from __future__ import annotations

from astrid.host.bus import Principal
from astrid.host.kernel.file_tracking import FILE, FOLDER, ReadKey, ReadTracker

ALICE, BOB = Principal.verified("alice"), Principal.verified("bob")


def key(uri: str, principal: Principal = ALICE, source: str = "files-1") -> ReadKey:
    return ReadKey(source, principal, uri)


def test_a_changed_file_updates_the_reads_that_touched_it_for_their_principal_only() -> None:
    tracker = ReadTracker()
    tracker.record(key("astrid://files/a.md"), 1, "/m/alice/a.md", FILE, root="/m/alice")
    tracker.record(key("astrid://files/a.md", BOB), 2, "/m/bob/a.md", FILE, root="/m/bob")
    tracker.record(key("astrid://files/b.md"), 3, "/m/alice/b.md", FILE, root="/m/alice")
    assert tracker.touched(["/m/alice/a.md"]) == [key("astrid://files/a.md")]
    assert tracker.touched(["/m/bob/a.md"]) == [key("astrid://files/a.md", BOB)]
    assert tracker.touched(["/m/alice/c.md", "/elsewhere"]) == []
    assert tracker.roots() == frozenset({"/m/alice", "/m/bob"})


def test_a_new_read_of_a_uri_replaces_what_the_last_one_touched() -> None:
    tracker = ReadTracker()
    tracker.record(key("astrid://x/latest"), "call-1", "/m/one.md", FILE)
    tracker.record(key("astrid://x/latest"), "call-1", "/m/index.md", FILE)  # the same call: both
    assert tracker.touched(["/m/one.md"]) == tracker.touched(["/m/index.md"]) == [key("astrid://x/latest")]
    tracker.record(key("astrid://x/latest"), "call-2", "/m/two.md", FILE)  # a later read looked elsewhere
    assert tracker.touched(["/m/one.md"]) == []
    assert tracker.touched(["/m/two.md"]) == [key("astrid://x/latest")]


def test_a_listed_folder_is_touched_by_any_file_beneath_it() -> None:
    tracker = ReadTracker()
    tracker.record(key("astrid://x/index"), 1, "/m/notes", FOLDER)
    assert tracker.touched(["/m/notes/new.md"]) == [key("astrid://x/index")]
    assert tracker.touched(["/m/notes/deep/er.md"]) == [key("astrid://x/index")]
    assert tracker.touched(["/m/notesmore/x.md", "/m/other.md"]) == []


def test_a_rebuilt_or_removed_capsule_forgets_its_reads() -> None:
    tracker = ReadTracker()
    tracker.record(key("astrid://files/a.md", source="old"), 1, "/m/a.md", FILE, root="/m")
    tracker.record(key("astrid://files/a.md", source="new"), 2, "/m/a.md", FILE, root="/m")
    tracker.forget("old")
    assert tracker.touched(["/m/a.md"]) == [key("astrid://files/a.md", source="new")]
    tracker.forget("new")
    assert tracker.touched(["/m/a.md"]) == [] and len(tracker) == 0 and tracker.roots() == frozenset()


def test_it_is_bounded_per_read_per_sandbox_and_in_all() -> None:
    tracker = ReadTracker(paths_per_read=2, reads_per_sandbox=3, max_reads=5)
    for n in range(5):
        tracker.record(key("astrid://x/big"), 1, f"/m/{n}", FILE)
    assert tracker.touched([f"/m/{n}" for n in range(5)]) == [key("astrid://x/big")]
    assert tracker.touched(["/m/2", "/m/3", "/m/4"]) == []  # past the cap: not watched
    for n in range(4):
        tracker.record(key(f"astrid://x/{n}"), n, f"/s/{n}", FILE)
    assert len(tracker) == 3  # alice's sandbox keeps its three latest reads
    assert tracker.touched(["/s/0"]) == [] and tracker.touched(["/s/3"]) == [key("astrid://x/3")]
    for n in range(4):
        tracker.record(key(f"astrid://y/{n}", BOB), n, f"/b/{n}", FILE)
    assert len(tracker) == 5  # in all: the least recently read go first
