"""Attacks on `astrid:fs` at the host module: every way out of a mount, and what must never be read.

Each attack names a path a hostile capsule could send; the defence must
refuse it with the right code, return none of the secret's bytes, and name
no host path. The same attacks go through a real capsule's raw bindings in
test_capability_attacks.py.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.fs import MountedFiles
from tests.host.capabilities.resolvers import RESOLVERS

SECRET = b"TOP-SECRET-CONTENT"


@pytest.fixture(params=RESOLVERS)
def files(request, tmp_path: Path) -> MountedFiles:
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_bytes(SECRET)
    notes = tmp_path / "notes"
    (notes / "inner").mkdir(parents=True)
    (notes / "ok.md").write_text("fine")
    (notes / "out-file").symlink_to(secret_dir / "key.txt")  # absolute target outside
    (notes / "out-rel").symlink_to("../secret/key.txt")  # relative target outside
    (notes / "out-dir").symlink_to("../secret")  # a folder outside
    (notes / "chain1").symlink_to("chain2")
    (notes / "chain2").symlink_to("../secret/key.txt")  # a chain that ends outside
    (notes / "inner" / "up").symlink_to("../../secret")  # a middle folder that leaves
    (notes / "environ").symlink_to("/proc/self/environ")
    (notes / "zero").symlink_to("/dev/zero")
    os.mkfifo(notes / "fifo")
    return MountedFiles("reader", {"notes": notes}, use_openat2=request.param)


def refused(files: MountedFiles, path: str, *, op: str = "read") -> CapabilityError:
    with pytest.raises(CapabilityError) as caught:
        result = getattr(files, op)(path)
        assert SECRET not in repr(result).encode()  # reached only when the defence failed
    error = caught.value
    assert SECRET.decode() not in str(error)
    assert str(files.mounts["notes"].parent) not in str(error)  # no host path in the text
    return error


@pytest.mark.parametrize(
    "path",
    [
        "notes/../secret/key.txt",
        "../secret/key.txt",
        "notes/inner/../../secret/key.txt",
        "notes/./ok.md",
        "notes//ok.md",
        "notes/..",
        "..",
        ".",
    ],
)
def test_dot_segments_anywhere_are_invalid(files: MountedFiles, path: str) -> None:
    assert refused(files, path).code == "invalid-path"


@pytest.mark.parametrize("path", ["/etc/passwd", "/proc/self/environ", "//notes/ok.md", "/notes/ok.md"])
def test_absolute_paths_are_invalid(files: MountedFiles, path: str) -> None:
    assert refused(files, path).code == "invalid-path"


@pytest.mark.parametrize("path", ["notes/ok.md\0", "notes/\x01x", "notes/ok\x7f", "notes/\x85", "notes\\ok.md"])
def test_nul_control_characters_and_backslashes_are_invalid(files: MountedFiles, path: str) -> None:
    assert refused(files, path).code == "invalid-path"


def test_a_lone_surrogate_is_invalid(files: MountedFiles) -> None:
    assert refused(files, "notes/\udcff").code == "invalid-path"


@pytest.mark.parametrize("path", ["notes/" + "a" * 256, "notes/" + "/".join(["a"] * 2100)])
def test_very_long_paths_and_segments_are_invalid(files: MountedFiles, path: str) -> None:
    assert refused(files, path).code == "invalid-path"


@pytest.mark.parametrize(
    "path", ["notes/out-file", "notes/out-rel", "notes/out-dir/key.txt", "notes/chain1", "notes/inner/up/key.txt"]
)
def test_symlinks_leading_out_of_the_mount_are_boundary_escapes(files: MountedFiles, path: str) -> None:
    assert refused(files, path).code == "boundary-escape"


def test_a_symlinked_folder_out_cannot_be_listed(files: MountedFiles) -> None:
    assert refused(files, "notes/out-dir", op="list").code in ("boundary-escape", "not-directory")
    assert refused(files, "notes/inner/up", op="list").code in ("boundary-escape", "not-directory")


def test_proc_and_devices_through_a_symlink_are_never_read(files: MountedFiles) -> None:
    assert refused(files, "notes/environ").code == "boundary-escape"
    assert refused(files, "notes/zero").code == "boundary-escape"


def test_a_fifo_is_refused_at_once_and_never_blocks(files: MountedFiles) -> None:
    outcome: list[object] = []
    reader = threading.Thread(target=lambda: outcome.append(_attempt(files, "notes/fifo")), daemon=True)
    reader.start()
    reader.join(5)
    assert not reader.is_alive(), "reading a FIFO blocked the host"
    assert outcome == ["access"]


def _attempt(files: MountedFiles, path: str) -> str:
    try:
        files.read(path)
    except CapabilityError as exc:
        return exc.code
    return "read"


@pytest.mark.parametrize("mount", ["secret", "..", "notes2", "NOTES"])
def test_a_mount_that_was_not_granted_gives_nothing(files: MountedFiles, mount: str) -> None:
    assert refused(files, f"{mount}/key.txt").code in ("capability-denied", "invalid-path")


def test_another_capsules_mount_is_not_this_capsules(tmp_path: Path) -> None:
    (tmp_path / "k.txt").write_bytes(SECRET)
    theirs = MountedFiles("other", {"notes": tmp_path})
    mine = MountedFiles("reader", {})
    assert theirs.read("notes/k.txt") == SECRET
    with pytest.raises(CapabilityError) as caught:
        mine.read("notes/k.txt")
    assert caught.value.code == "capability-denied"
