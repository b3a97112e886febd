"""Shared kv state on NATS JetStream: two hosts (two connections) see one state, quotas hold across them.

A real nats-server with JetStream on; each `NatsKvStore` rides its own
`NatsBus` connection, as two replicas on two machines would.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.bus.nats import NatsBus
from astrid.host.capabilities import CapabilityError
from astrid.host.capabilities.kv import MAX_VALUE_BYTES
from astrid.host.capabilities.kv_nats import NatsKvStore
from astrid.host.contract.topics import HOST_CLUSTER
from tests.support.nats import NatsServer, nats_server

pytestmark = pytest.mark.slow


def connect(url: str) -> NatsBus:
    return NatsBus(url, role="capsules", cluster=HOST_CLUSTER).connect()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path, jetstream=True) as running:
        yield running


@pytest.fixture
def buses(server: NatsServer) -> Iterator[tuple[NatsBus, NatsBus]]:
    first, second = connect(server.url()), connect(server.url())
    yield first, second
    first.close()
    second.close()


def code_of(call) -> str:
    with pytest.raises(CapabilityError) as caught:
        call()
    return caught.value.code


def test_written_through_one_host_read_through_the_other(buses) -> None:
    here, there = NatsKvStore(buses[0]), NatsKvStore(buses[1])
    mine = here.namespace("alice", "notes")
    assert mine.get("a") is None and mine.list_keys() == []
    mine.set("a", b"1")
    mine.set("a", b"2")  # overwrite
    mine.set("b/c", b"\x00\xff")
    theirs = there.namespace("alice", "notes")
    assert theirs.get("a") == b"2" and theirs.get("b/c") == b"\x00\xff"
    assert theirs.list_keys() == ["a", "b/c"] and theirs.list_keys("b") == ["b/c"]
    theirs.delete("a")
    theirs.delete("a")  # idempotent
    assert mine.get("a") is None and mine.list_keys() == ["b/c"]
    mine.set("a", b"again")  # a deleted key comes back
    assert theirs.get("a") == b"again"


def test_limits_are_those_of_the_sqlite_store(buses) -> None:
    space = NatsKvStore(buses[0]).namespace("alice", "notes")
    assert code_of(lambda: space.set("", b"v")) == "invalid-key"
    assert code_of(lambda: space.get("a\0b")) == "invalid-key"
    assert code_of(lambda: space.set("big", b"x" * (MAX_VALUE_BYTES + 1))) == "too-large"
    space.set("big", b"x" * MAX_VALUE_BYTES)  # the largest value fits (the server allows 2 MB payloads)
    assert space.get("big") == b"x" * MAX_VALUE_BYTES


def test_a_quota_holds_against_writers_on_two_hosts_at_once(buses) -> None:
    stores = [NatsKvStore(bus, max_keys=5) for bus in buses]
    accepted: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def writer(store: NatsKvStore, tag: str) -> None:
        space = store.namespace("alice", "notes")
        for n in range(6):
            key = f"{tag}{n}"
            try:
                space.set(key, b"v")
                outcome = accepted
            except CapabilityError as exc:
                assert exc.code == "quota"
                outcome = refused
            with lock:
                outcome.append(key)

    threads = [threading.Thread(target=writer, args=(stores[i % 2], f"w{i}-")) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(accepted) == 5 and len(refused) == 19  # not one key past the quota, from either host
    assert sorted(stores[1].namespace("alice", "notes").list_keys()) == sorted(accepted)
    # deleting makes room again, counted exactly
    stores[0].namespace("alice", "notes").delete(accepted[0])
    stores[1].namespace("alice", "notes").set("one-more", b"v")
    assert code_of(lambda: stores[0].namespace("alice", "notes").set("past", b"v")) == "quota"


def test_racing_overwrites_of_one_key_keep_the_byte_count_exact(buses) -> None:
    stores = [NatsKvStore(bus, max_keys=10, max_bytes=4000) for bus in buses]

    def writer(store: NatsKvStore, size: int) -> None:
        for _ in range(10):
            store.namespace("alice", "notes").set("k", b"x" * size)

    threads = [threading.Thread(target=writer, args=(stores[i % 2], 100 * (i + 1))) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # whatever won, the counter says exactly one key of its size: room for the rest of the quota
    size = len(stores[0].namespace("alice", "notes").get("k") or b"")
    stores[0].namespace("alice", "notes").set("fill", b"x" * (4000 - size - 1 - 4))
    assert code_of(lambda: stores[0].namespace("alice", "notes").set("more", b"")) == "quota"


def test_without_jetstream_kv_fails_with_one_clear_line(tmp_path: Path) -> None:
    with nats_server(tmp_path) as plain:  # no -js
        bus = connect(plain.url())
        try:
            with pytest.raises(CapabilityError) as caught:
                NatsKvStore(bus).namespace("alice", "notes").get("k")
        finally:
            bus.close()
    assert "JetStream" in str(caught.value.detail) and "-js" in str(caught.value.detail)
