"""The capsule-folder watcher behind hot reload: real files, a real thread."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from astrid.host.mcp.runtime import FolderWatcher

WAIT_S = 10


def watched(tmp_path: Path) -> tuple[FolderWatcher, threading.Event]:
    capsule = tmp_path / "capsules" / "one"
    capsule.mkdir(parents=True)
    (capsule / "Capsule.toml").write_text("[package]\nname = 'one'\n")
    (capsule / "one.wasm").write_bytes(b"\0asm")
    fired = threading.Event()
    watcher = FolderWatcher([tmp_path / "capsules"], fired.set, interval_s=0.02)
    return watcher, fired


def test_a_change_made_right_after_start_is_seen(tmp_path):
    watcher, fired = watched(tmp_path)
    watcher.start()
    try:
        shutil.rmtree(tmp_path / "capsules" / "one")  # before the thread has had a chance to run
        assert fired.wait(WAIT_S)
        assert watcher.reloads == 1
    finally:
        watcher.stop()


def test_no_change_no_reload_and_a_burst_is_one_reload(tmp_path):
    watcher, fired = watched(tmp_path)
    watcher.start()
    try:
        assert not fired.wait(0.3)
        folder = tmp_path / "capsules" / "one"
        (folder / "one.wasm").write_bytes(b"\0asm" + b"\1" * 64)
        (folder / "extra.txt").write_text("x")
        assert fired.wait(WAIT_S)
        fired.clear()
        assert not fired.wait(0.3)
        assert watcher.reloads == 1
    finally:
        watcher.stop()


def test_temporary_and_hidden_files_are_ignored(tmp_path):
    watcher, fired = watched(tmp_path)
    watcher.start()
    try:
        folder = tmp_path / "capsules" / "one"
        (folder / "build.tmp").write_text("partial")
        (folder / ".swap").write_text("editor")
        (folder / "__pycache__").mkdir()
        (folder / "__pycache__" / "x.pyc").write_bytes(b"")
        assert not fired.wait(0.4)
    finally:
        watcher.stop()
