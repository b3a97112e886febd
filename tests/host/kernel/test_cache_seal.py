"""Seals on compile-cache entries: only bytes this user's host wrote are trusted."""

from __future__ import annotations

import os
import stat

from astrid.host.kernel.cache_seal import CacheSeal


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
