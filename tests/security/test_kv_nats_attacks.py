"""Attacks on shared kv state (JetStream, one bucket for everyone): reaching another namespace's keys.

Every principal and capsule shares one bucket, so the namespace lives in the
NATS key itself. Names and keys chosen to look like NATS syntax (tokens,
wildcards) or to collide when glued together must never reach, list,
overwrite or delete another principal's or capsule's keys.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from astrid.host.bus.nats import NatsBus
from astrid.host.capabilities.kv_nats import NatsKvStore
from astrid.host.contract.topics import HOST_CLUSTER
from tests.support.nats import nats_server

pytestmark = pytest.mark.slow

# Names and keys that are NATS subject syntax, or that glue into each other.
TRICKS = ["a.b", "a", "b", "*", ">", "a.>", "a.*", "v", "m", "x", "", "ab", "a\x1fb", "..", "a b", "é.ü"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsKvStore]:
    with nats_server(tmp_path_factory.mktemp("nats"), jetstream=True) as server:
        bus = NatsBus(server.url(), role="capsules", cluster=HOST_CLUSTER).connect()
        try:
            yield NatsKvStore(bus)
        finally:
            bus.close()


@pytest.mark.parametrize(
    ("victim", "attacker"),
    [
        (("alice", "notes"), ("bob", "notes")),  # another principal
        (("alice", "notes"), ("alice", "other")),  # another capsule
        (("a.b", "c"), ("a", "b.c")),  # dots would shift the namespace tokens
        (("a", "b.c"), ("a.b", "c")),
        (("a", "bc"), ("ab", "c")),  # glued names
        (("alice", "notes"), ("alice", "*")),  # wildcards as names
        (("alice", "notes"), (">", ">")),
        (("alice", "notes"), ("alice.notes", "x")),
    ],
)
def test_no_name_reaches_another_namespace(store: NatsKvStore, victim, attacker) -> None:
    mine = store.namespace(*victim)
    mine.set("secret", b"victim's")
    theirs = store.namespace(*attacker)
    assert theirs.get("secret") is None
    assert "secret" not in theirs.list_keys()
    theirs.delete("secret")  # a delete in their namespace touches only theirs
    theirs.set("secret", b"overwritten?")
    assert mine.get("secret") == b"victim's"
    theirs.delete("secret")
    mine.delete("secret")


@pytest.mark.parametrize("key", [k for k in TRICKS if k and k.isprintable()])
def test_keys_that_look_like_nats_syntax_are_plain_keys(store: NatsKvStore, key: str) -> None:
    store.namespace("bob", "notes").set("other", b"bob's")
    mine = store.namespace("alice", "tricks")
    mine.set(key, b"v")
    assert mine.get(key) == b"v"
    assert mine.list_keys() == [key]
    assert store.namespace("bob", "notes").get("other") == b"bob's"
    assert store.namespace("bob", "notes").list_keys() == ["other"]  # nothing of alice's listed
    mine.delete(key)


def test_a_listing_never_shows_another_namespaces_keys_whatever_its_names(store: NatsKvStore) -> None:
    spaces = [store.namespace(p, c) for p in ("a", "a.b", "ab", ">") for c in ("c", "b.c", "*")]
    for n, space in enumerate(spaces):
        space.set(f"k{n}", b"v")
    for n, space in enumerate(spaces):
        assert space.list_keys() == [f"k{n}"]
        assert space.list_keys("k") == [f"k{n}"]
