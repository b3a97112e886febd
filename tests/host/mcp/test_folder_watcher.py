"""The capsule-folder watcher behind hot reload: real files, a real thread."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.watch import FolderWatcher

WAIT_S = 10


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    capsule = tmp_path / "capsules" / "one"
    capsule.mkdir(parents=True)
    (capsule / "Capsule.toml").write_text("[package]\nname = 'one'\n")
    (capsule / "one.wasm").write_bytes(b"\0asm")
    return capsule


@pytest.fixture
def watched(folder: Path) -> Iterator[tuple[FolderWatcher, threading.Event]]:
    """A running watcher on the parent of `folder`, polling every 100 ms."""
    fired = threading.Event()
    watcher = FolderWatcher([folder.parent], fired.set, interval_s=0.1)
    watcher.start()
    yield watcher, fired
    watcher.stop()


def test_a_change_made_right_after_start_is_seen(folder, watched):
    watcher, fired = watched
    shutil.rmtree(folder)  # before the thread has had a chance to run
    assert fired.wait(WAIT_S)
    assert watcher.reloads == 1


def test_no_change_no_reload_and_a_burst_is_one_reload(folder, watched):
    watcher, fired = watched
    assert not fired.wait(0.5)
    (folder / "one.wasm").write_bytes(b"\0asm" + b"\1" * 64)
    (folder / "extra.txt").write_text("x")
    assert fired.wait(WAIT_S)
    fired.clear()
    assert not fired.wait(0.5)
    assert watcher.reloads == 1


def test_temporary_and_hidden_files_are_ignored(folder, watched):
    _, fired = watched
    (folder / "build.tmp").write_text("partial")
    (folder / ".swap").write_text("editor")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.pyc").write_bytes(b"")
    assert not fired.wait(0.5)
