"""Durable key-value state: one namespace per (principal, capsule), quotas, restarts, several processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.kv import MAX_LISTED, MAX_VALUE_BYTES, KvStore


@pytest.fixture
def store(tmp_path: Path):
    opened = KvStore(tmp_path / "data" / "kv.sqlite3")
    yield opened
    opened.close()


def code_of(call) -> str:
    with pytest.raises(CapabilityError) as caught:
        call()
    return caught.value.code


def test_get_set_delete_and_list_keys(store: KvStore) -> None:
    space = store.namespace("alice", "notes")
    assert space.get("a") is None
    space.set("a", b"1")
    space.set("a", b"2")  # overwrite
    space.set("b/c", b"\x00\xff")
    assert space.get("a") == b"2" and space.get("b/c") == b"\x00\xff"
    assert space.list_keys() == ["a", "b/c"]
    assert space.list_keys("b") == ["b/c"]
    space.delete("a")
    space.delete("a")  # idempotent
    assert space.get("a") is None and space.list_keys() == ["b/c"]


def test_the_file_is_private_and_state_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    first = KvStore(path)
    first.namespace("alice", "notes").set("k", b"kept")
    first.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    second = KvStore(path)
    assert second.namespace("alice", "notes").get("k") == b"kept"
    second.close()


@pytest.mark.parametrize("key", ["", "a\0b", "tab\tkey", "x" * 257, "é" * 129, "\udcff"])
def test_bad_keys_are_refused(store: KvStore, key: str) -> None:
    space = store.namespace("alice", "notes")
    assert code_of(lambda: space.set(key, b"v")) == "invalid-key"
    assert code_of(lambda: space.get(key)) == "invalid-key"


def test_a_prefix_is_literal_not_a_pattern(store: KvStore) -> None:
    space = store.namespace("alice", "notes")
    for key in ("100%", "100x", "a_b", "axb"):
        space.set(key, b"v")
    assert space.list_keys("100%") == ["100%"]
    assert space.list_keys("a_") == ["a_b"]


def test_values_and_listings_are_capped(store: KvStore) -> None:
    space = store.namespace("alice", "notes")
    assert code_of(lambda: space.set("big", b"x" * (MAX_VALUE_BYTES + 1))) == "too-large"
    space.set("big", b"x" * MAX_VALUE_BYTES)
    small = KvStore(store.path, max_keys=MAX_LISTED + 5)
    many = small.namespace("bob", "notes")
    for n in range(MAX_LISTED + 1):
        many.set(f"k{n:05d}", b"")
    assert code_of(many.list_keys) == "too-large"
    assert len(many.list_keys("k0000")) == 10
    small.close()


def test_quotas_on_keys_and_bytes_count_overwrites_once(tmp_path: Path) -> None:
    store = KvStore(tmp_path / "kv.sqlite3", max_keys=2, max_bytes=100)
    space = store.namespace("alice", "notes")
    space.set("a", b"x" * 40)
    space.set("b", b"x" * 40)
    assert code_of(lambda: space.set("c", b"")) == "quota"  # a third key
    space.set("a", b"y" * 58)  # overwrite: 1+58 + 1+40 = 100, just fits
    assert code_of(lambda: space.set("a", b"y" * 59)) == "quota"  # 101 bytes
    assert space.get("a") == b"y" * 58  # the refused write changed nothing
    space.delete("b")
    space.set("c", b"z")
    store.namespace("bob", "notes").set("a", b"x" * 90)  # another namespace has its own quota
    store.close()


_WRITER = """
import sys
from pathlib import Path
from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.kv import KvStore
store = KvStore(Path(sys.argv[1]), max_keys=50)
space = store.namespace("alice", "notes")
written = 0
for n in range(40):
    try:
        space.set(f"{sys.argv[2]}-{n}", b"v")
        written += 1
    except CapabilityError as exc:
        assert exc.code == "quota", exc
print(written)
"""


def test_two_processes_writing_at_once_never_exceed_the_quota(tmp_path: Path) -> None:
    path = tmp_path / "kv.sqlite3"
    KvStore(path).close()
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name], stdout=subprocess.PIPE, text=True)
        for name in ("p1", "p2")
    ]
    written = [int(w.communicate(timeout=60)[0]) for w in writers]
    assert all(w.returncode == 0 for w in writers)
    store = KvStore(path, max_keys=50)
    keys = store.namespace("alice", "notes").list_keys()
    store.close()
    assert sum(written) == len(keys) == 50
