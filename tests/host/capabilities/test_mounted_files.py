"""Read-only files beneath granted mounts: what a capsule can read, list and stat, with both resolvers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities import fs as fs_module
from astrid.host.capabilities.fs import LIST_CAP, READ_CAP, MountedFiles
from tests.host.capabilities.resolvers import RESOLVERS


@pytest.fixture(params=RESOLVERS)
def files(request, tmp_path: Path) -> MountedFiles:
    notes = tmp_path / "notes"
    (notes / "sub").mkdir(parents=True)
    (notes / "today.md").write_text("# Today\n")
    (notes / "sub" / "deep.txt").write_text("deep")
    return MountedFiles("reader", {"notes": notes}, asked=["notes", "photos"], use_openat2=request.param)


def code_of(call) -> str:
    with pytest.raises(CapabilityError) as caught:
        call()
    return caught.value.code


def test_read_list_and_stat_beneath_a_mount(files: MountedFiles) -> None:
    assert files.read("notes/today.md") == b"# Today\n"
    assert files.read("notes/sub/deep.txt") == b"deep"
    entries = files.list("notes")
    assert [(e.name, e.kind) for e in entries] == [("sub", "directory"), ("today.md", "file")]
    assert entries[1].size == 8 and entries[1].modified_ms > 1_600_000_000_000
    assert files.list("notes/") == entries
    assert files.stat("notes/today.md").kind == "file" and files.stat("notes/today.md").size == 8
    assert files.stat("notes").kind == "directory"


def test_a_read_sees_the_file_as_it_is_now(files: MountedFiles) -> None:
    assert files.read("notes/today.md") == b"# Today\n"
    (files.mounts["notes"] / "today.md").write_text("# Changed\n")
    assert files.read("notes/today.md") == b"# Changed\n"


def test_errors_say_what_and_never_the_host_path(files: MountedFiles) -> None:
    assert code_of(lambda: files.read("notes/missing.md")) == "not-found"
    assert code_of(lambda: files.read("notes/sub")) == "is-directory"
    assert code_of(lambda: files.read("notes")) == "is-directory"
    assert code_of(lambda: files.list("notes/today.md")) == "not-directory"
    assert code_of(lambda: files.read("notes/today.md/x")) == "not-directory"
    with pytest.raises(CapabilityError) as caught:
        files.read("notes/../x")
    assert caught.value.code == "invalid-path" and str(files.mounts["notes"]) not in str(caught.value)


def test_a_mount_not_granted_names_the_fix_ask_or_grant(files: MountedFiles) -> None:
    with pytest.raises(CapabilityError) as asked:
        files.read("photos/cat.png")
    assert asked.value.code == "capability-denied"
    assert "astrid capsule grant reader fs:photos=PATH" in (asked.value.detail or "")
    with pytest.raises(CapabilityError) as not_asked:
        files.read("secrets/key")
    assert "does not ask for the fs mount 'secrets'" in (not_asked.value.detail or "")


def test_a_missing_mount_folder_is_not_found(tmp_path: Path) -> None:
    files = MountedFiles("reader", {"notes": tmp_path / "absent"})
    assert code_of(lambda: files.read("notes/x")) == "not-found"


def test_reads_and_lists_are_capped(files: MountedFiles, monkeypatch) -> None:
    big = files.mounts["notes"] / "big.bin"
    with open(big, "wb") as out:
        out.truncate(READ_CAP + 1)  # sparse: no 8 MiB written
    assert code_of(lambda: files.read("notes/big.bin")) == "too-large"
    os.truncate(big, READ_CAP)
    assert len(files.read("notes/big.bin")) == READ_CAP
    monkeypatch.setattr(fs_module, "LIST_CAP", 1)
    assert code_of(lambda: files.list("notes")) == "too-large"
    assert LIST_CAP == 4096


def test_a_symlink_inside_the_mount_works_with_openat2_and_is_refused_by_the_walk(files: MountedFiles) -> None:
    (files.mounts["notes"] / "alias.md").symlink_to("today.md")
    if files.use_openat2:
        assert files.read("notes/alias.md") == b"# Today\n"
    else:
        assert code_of(lambda: files.read("notes/alias.md")) == "boundary-escape"
    assert files.stat("notes/alias.md").kind == "symlink"  # stat reports the link itself
