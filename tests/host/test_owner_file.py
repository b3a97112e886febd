"""`OwnerOnlyFile` on disk: never through a symlink, always in the folder that was checked, writes atomic."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from astrid.host.errors import TokenError
from astrid.host.owner_file import OwnerOnlyFile

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX symlinks, FIFOs and modes")


def owner_file(path: Path) -> OwnerOnlyFile[object]:
    return OwnerOnlyFile(
        path,
        noun="token file",
        stakes="who may log in",
        error=TokenError,
        parse=lambda _, raw: json.loads(raw),
        empty={},
    )


def write(file: OwnerOnlyFile[object], document: object) -> None:
    with file.rewriting():
        file.write_json(document)


@pytest.fixture
def file(tmp_path: Path) -> OwnerOnlyFile[object]:
    return owner_file(tmp_path / "config" / "tokens.json")


def test_a_written_file_reads_back_and_leaves_only_its_lock_beside_it(file: OwnerOnlyFile[object]) -> None:
    write(file, {"a": 1})
    assert file.current() == {"a": 1}
    assert sorted(os.listdir(file.path.parent)) == [".tokens.json.lock", "tokens.json"]
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600


@posix_only
@pytest.mark.parametrize("target_in", ["same folder", "open folder"])
def test_a_symlinked_file_is_refused_naming_the_fix_and_left_alone(
    file: OwnerOnlyFile[object], tmp_path: Path, target_in: str
) -> None:
    write(file, {"a": 1})
    folder = file.path.parent if target_in == "same folder" else tmp_path / "shared"
    folder.mkdir(exist_ok=True)
    target = folder / "real.json"
    os.replace(file.path, target)
    file.path.symlink_to(target)
    fresh = owner_file(file.path)
    for action in (fresh.current, lambda: write(fresh, {"b": 2}), file.current):
        with pytest.raises(TokenError) as caught:
            action()
        message = str(caught.value)
        assert f"the token file {file.path} is a symbolic link (to {target})" in message
        assert f"`mv {target} {file.path}`" in message
    assert file.path.is_symlink() and json.loads(target.read_text()) == {"a": 1}  # nothing written anywhere
    os.replace(target, file.path)  # the fix the message names
    assert owner_file(file.path).current() == {"a": 1}


@posix_only
def test_a_dangling_symlink_is_refused_not_created_through(file: OwnerOnlyFile[object], tmp_path: Path) -> None:
    file.path.parent.mkdir(mode=0o700)
    file.path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(TokenError, match="symbolic link"):
        write(file, {"b": 2})
    assert not (tmp_path / "elsewhere.json").exists()


@posix_only
def test_a_fifo_in_the_files_place_is_refused_without_blocking(file: OwnerOnlyFile[object]) -> None:
    file.path.parent.mkdir(mode=0o700)
    os.mkfifo(file.path, 0o600)
    with pytest.raises(TokenError, match="not a regular file"):
        file.current()


@posix_only
def test_a_symlinked_lock_file_is_refused(file: OwnerOnlyFile[object], tmp_path: Path) -> None:
    file.path.parent.mkdir(mode=0o700)
    file.path.with_name(".tokens.json.lock").symlink_to(tmp_path / "planted")
    with pytest.raises(TokenError, match="cannot create the lock file"):
        write(file, {"b": 2})
    assert not (tmp_path / "planted").exists()


@posix_only
def test_the_file_is_read_from_the_folder_that_was_checked(
    file: OwnerOnlyFile[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(file, {"who": "alice"})
    decoy = tmp_path / "decoy"
    decoy.mkdir(mode=0o700)
    (decoy / "tokens.json").write_text('{"who": "mallory"}')
    (decoy / "tokens.json").chmod(0o600)
    real_check = OwnerOnlyFile._check_folder

    def check_then_swap(self: OwnerOnlyFile[object], folder_fd: int | None) -> None:
        real_check(self, folder_fd)
        if not self.path.parent.is_symlink():  # the folder is swapped right after its check
            os.rename(self.path.parent, tmp_path / "moved")
            self.path.parent.symlink_to(decoy)

    monkeypatch.setattr(OwnerOnlyFile, "_check_folder", check_then_swap)
    assert file.current() == {"who": "alice"}  # what the checked folder held, never the decoy


@posix_only
def test_a_write_into_a_folder_swapped_after_its_check_lands_in_the_checked_folder(
    file: OwnerOnlyFile[object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(file, {"v": 1})
    decoy = tmp_path / "decoy"
    decoy.mkdir(mode=0o700)
    real_check = OwnerOnlyFile._check_folder
    swapped: list[bool] = []

    def check_then_swap(self: OwnerOnlyFile[object], folder_fd: int | None) -> None:
        real_check(self, folder_fd)
        if not swapped:
            swapped.append(True)
            os.rename(self.path.parent, tmp_path / "moved")
            self.path.parent.symlink_to(decoy)

    monkeypatch.setattr(OwnerOnlyFile, "_check_folder", check_then_swap)
    file.write_json({"v": 2})
    assert json.loads((tmp_path / "moved" / "tokens.json").read_text()) == {"v": 2}
    assert os.listdir(decoy) == []


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(
    file: OwnerOnlyFile[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(file, {"v": 1})

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(TokenError, match=r"cannot write the token file .*No space left"):
        write(file, {"v": 2})
    monkeypatch.undo()
    assert owner_file(file.path).current() == {"v": 1}
    assert not [name for name in os.listdir(file.path.parent) if name.endswith(".tmp")]


@posix_only
def test_a_replaced_file_is_noticed_even_when_replaced_by_a_link_to_the_same_inode(
    file: OwnerOnlyFile[object], tmp_path: Path
) -> None:
    write(file, {"v": 1})
    assert file.current() == {"v": 1}
    target = file.path.with_name("real.json")
    os.link(file.path, target)  # same inode, same times: only the link itself differs
    file.path.unlink()
    file.path.symlink_to(target)
    with pytest.raises(TokenError, match="symbolic link"):
        file.current()
