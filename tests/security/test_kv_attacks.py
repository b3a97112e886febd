"""Attacks on `astrid:kv` at the host module: reaching another principal's or capsule's keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from astrid.host.capabilities.kv import KvStore


@pytest.fixture
def store(tmp_path: Path):
    opened = KvStore(tmp_path / "kv.sqlite3")
    yield opened
    opened.close()


def test_two_principals_never_see_each_others_keys(store: KvStore) -> None:
    store.namespace("alice", "notes").set("diary", b"alice's secret")
    bob = store.namespace("bob", "notes")
    assert bob.get("diary") is None
    assert bob.list_keys() == [] and bob.list_keys("d") == []
    bob.delete("diary")  # cannot delete it either
    assert store.namespace("alice", "notes").get("diary") == b"alice's secret"


def test_two_capsules_never_see_each_others_keys(store: KvStore) -> None:
    store.namespace("alice", "notes").set("token", b"notes' secret")
    assert store.namespace("alice", "other").get("token") is None
    assert store.namespace("alice", "other").list_keys() == []


@pytest.mark.parametrize(
    ("first", "second"),
    [(("a:b", "c"), ("a", "b:c")), (("a", "b\x1fc"), ("a\x1fb", "c")), (("a", "bc"), ("ab", "c"))],
)
def test_names_that_would_collide_if_glued_together_stay_apart(store: KvStore, first, second) -> None:
    store.namespace(*first).set("k", b"first")
    assert store.namespace(*second).get("k") is None
    assert store.namespace(*second).list_keys() == []


@pytest.mark.parametrize("key", ["'; DROP TABLE kv; --", "k' OR '1'='1", "%", "_"])
def test_keys_with_sql_metacharacters_are_plain_keys(store: KvStore, key: str) -> None:
    store.namespace("bob", "notes").set("other", b"bob's")
    mine = store.namespace("alice", "notes")
    mine.set(key, b"v")
    assert mine.get(key) == b"v"
    assert mine.list_keys() == [key]
    assert store.namespace("bob", "notes").get("other") == b"bob's"  # the table is intact
