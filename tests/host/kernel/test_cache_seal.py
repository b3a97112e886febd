"""Seals on compile-cache entries: only bytes this user's host wrote are trusted."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from astrid.host.kernel import cache_seal
from astrid.host.kernel.cache_seal import CacheKeyError, CacheSeal, load_or_create_key, read_key


def sealed_entry(tmp_path, data: bytes = b"\x7fELF native code" * 64):
    seal = CacheSeal(tmp_path / "config" / "compile-cache.key")
    entry = tmp_path / "cache" / "x.cwasm"
    entry.parent.mkdir()
    entry.write_bytes(data)
    seal.sign(entry)
    return seal, entry


def test_a_signed_entry_verifies_and_the_key_is_private(tmp_path):
    seal, entry = sealed_entry(tmp_path)
    assert seal.verify(entry)
    key = tmp_path / "config" / "compile-cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    # another process of the same user (same key file) trusts it too
    assert CacheSeal(key).verify(entry)


def test_an_unsealed_or_altered_entry_is_not_trusted(tmp_path):
    seal, entry = sealed_entry(tmp_path)
    other = entry.with_name("y.cwasm")
    other.write_bytes(entry.read_bytes())
    assert not seal.verify(other)  # no seal
    entry.write_bytes(entry.read_bytes() + b"!")
    assert not seal.verify(entry)


def test_a_same_size_rewrite_with_the_mtime_put_back_is_caught_after_a_verify(tmp_path):
    seal, entry = sealed_entry(tmp_path)
    assert seal.verify(entry)  # remembered for this process...
    before = entry.stat()
    data = bytearray(entry.read_bytes())
    data[10] ^= 0xFF
    entry.write_bytes(bytes(data))
    os.utime(entry, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert not seal.verify(entry)  # ...but the ctime moved: checked again, and refused


def test_another_users_key_does_not_verify(tmp_path):
    _, entry = sealed_entry(tmp_path)
    stranger = CacheSeal(tmp_path / "elsewhere" / "compile-cache.key")
    assert not stranger.verify(entry)


def test_without_a_usable_key_file_entries_verify_only_in_this_process(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    seal = CacheSeal(blocker / "compile-cache.key")
    entry = tmp_path / "x.cwasm"
    entry.write_bytes(b"code")
    seal.sign(entry)
    assert seal.verify(entry)
    assert not CacheSeal(blocker / "compile-cache.key").verify(entry)


# -- the key file: made atomically, used only when it is the user's own -----------------------

posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX owners and modes")
SEAL_LOG = "astrid.host.kernel.cache_seal"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_seal, "_warned", set())  # "logged once" is per process: per test here


def refused(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == SEAL_LOG and r.levelno == logging.WARNING]


def test_a_new_key_is_32_random_bytes_0600_whatever_the_umask_and_no_temp_file_is_left(tmp_path: Path) -> None:
    key = tmp_path / "config" / "compile-cache.key"
    old_umask = os.umask(0)
    try:
        made = load_or_create_key(key)
    finally:
        os.umask(old_umask)
    assert key.read_bytes() == made and len(made) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert os.listdir(key.parent) == [key.name]
    assert load_or_create_key(key) == made  # read back, not made again


def test_a_failed_write_leaves_no_key_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "compile-cache.key"

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        load_or_create_key(key)
    assert os.listdir(tmp_path) == []  # neither an empty key nor a temp file


def test_concurrent_creators_all_use_the_first_key(tmp_path: Path) -> None:
    key = tmp_path / "compile-cache.key"
    keys: list[bytes] = []
    barrier = threading.Barrier(16)

    def create() -> None:
        barrier.wait()
        keys.append(load_or_create_key(key))

    threads = [threading.Thread(target=create) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(keys) == 16 and set(keys) == {key.read_bytes()}
    assert os.listdir(tmp_path) == [key.name]


def test_a_race_lost_at_the_link_uses_the_winners_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "compile-cache.key"
    winner = b"w" * 32
    real_link = os.link

    def other_process_first(source: str, target: str) -> None:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, winner)
        os.close(fd)
        real_link(source, target)  # FileExistsError: never over the winner's key

    monkeypatch.setattr(os, "link", other_process_first)
    assert load_or_create_key(key) == winner
    assert key.read_bytes() == winner and os.listdir(tmp_path) == [key.name]


@pytest.mark.parametrize("content", [b"", b"k", b"k" * 31])
def test_a_short_key_file_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    key = tmp_path / "compile-cache.key"
    key.write_bytes(content)
    key.chmod(0o600)
    with pytest.raises(CacheKeyError) as caught:
        read_key(key)
    assert str(caught.value) == (
        f"the compile-cache key {key} is too short ({len(content)} bytes, at least 32): "
        f"delete {key} and astrid makes a new key"
    )
    assert key.read_bytes() == content  # astrid does not replace a key on its own


def test_only_the_first_64_bytes_are_the_key(tmp_path: Path) -> None:
    key = tmp_path / "compile-cache.key"
    key.write_bytes(bytes(range(100)))
    key.chmod(0o600)
    assert read_key(key) == bytes(range(64))


@posix_only
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o660, 0o644, 0o666])
def test_a_key_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    key = tmp_path / "compile-cache.key"
    load_or_create_key(key)
    key.chmod(mode)
    with pytest.raises(CacheKeyError, match=rf"open to other users .*delete {key} and astrid makes a new key"):
        read_key(key)
    key.chmod(0o600)
    assert len(read_key(key)) == 32


@posix_only
def test_a_key_file_owned_by_someone_else_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = tmp_path / "compile-cache.key"
    load_or_create_key(key)
    owner = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: owner + 4242)
    with pytest.raises(CacheKeyError, match=rf"belongs to uid {owner}, not to you .*delete {key}"):
        read_key(key)


@posix_only
def test_a_symlinked_or_special_key_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.key"
    load_or_create_key(real)
    link = tmp_path / "link.key"
    link.symlink_to(real)
    with pytest.raises(CacheKeyError, match=r"symbolic link .*does not follow"):
        load_or_create_key(link)
    dangling = tmp_path / "dangling.key"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CacheKeyError, match="symbolic link"):
        load_or_create_key(dangling)  # not created through the link either
    assert not (tmp_path / "nowhere").exists()
    fifo = tmp_path / "fifo.key"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(CacheKeyError, match="not a regular file"):
        read_key(fifo)  # and no hang waiting for a writer


def test_a_refused_key_never_seals_falls_back_to_a_per_process_key_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = tmp_path / "compile-cache.key"
    key.write_bytes(b"")
    key.chmod(0o600)
    entry = tmp_path / "x.cwasm"
    entry.write_bytes(b"code")
    with caplog.at_level(logging.WARNING, logger=SEAL_LOG):
        first, second = CacheSeal(key), CacheSeal(key)
    first.sign(entry)
    seal = entry.with_name("x.cwasm.seal").read_text()
    assert seal != hmac.new(b"", b"code", hashlib.sha256).hexdigest()  # not the empty key
    assert first.verify(entry) and not second.verify(entry)  # the per-process key: this process only
    (line,) = refused(caplog)  # two seals, one warning
    assert str(key) in line and "too short" in line and f"delete {key}" in line and "\n" not in line
    assert key.read_bytes() == b""


def test_an_unwritable_key_folder_stays_an_info_not_a_refusal(tmp_path: Path, caplog) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with caplog.at_level(logging.INFO, logger=SEAL_LOG):
        CacheSeal(blocker / "compile-cache.key")
    assert refused(caplog) == []
    assert any("verify only in this process" in r.getMessage() for r in caplog.records)
