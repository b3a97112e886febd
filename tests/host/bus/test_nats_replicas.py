"""Replicas on a real nats-server: the same capsule (same source-id) on two hosts is one NATS queue group.

Each request reaches one replica, the load is shared, the round ends when the
group reported, the capsule set (not the replica count) drives membership,
and a replica that leaves mid-request has the request served by the other.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from astrid.host.bus import Binding, Message, Principal, host_participant
from astrid.host.bus.nats import NatsBus
from astrid.host.contract.topics import HOST_CLUSTER
from astrid.host.kernel.dispatch import PoolDispatcher
from tests.support.nats import NatsServer, nats_server

ALICE = Principal.verified("alice")
REQUESTS, REPLIES = "resource.v1.request.*", "resource.v1.response.*"
GROUP = "docs-src"  # what a capsule's source-id is: its name and build digest, the same on every replica

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path) as running:
        yield running


def bus(server: NatsServer, role: str) -> NatsBus:
    listen = (REPLIES,) if role == "mcp" else (REQUESTS,)
    return NatsBus(
        server.url(),
        role=role,
        cluster=HOST_CLUSTER,
        shared=(REQUESTS, REPLIES),
        listen=listen,
        tracked=(REQUESTS,),
        dispatcher=PoolDispatcher(),  # handlers on worker threads, as in a kernel
    ).connect()


def replica(server: NatsServer, served: Counter, name: str, hold: threading.Event | None = None) -> NatsBus:
    """A capsule host running the capsule GROUP; `served[name]` counts the requests it answered."""
    host = bus(server, "capsules")
    capsule = host_participant("docs", GROUP, publish=[REPLIES], subscribe=[REQUESTS])

    def answer(message) -> None:
        if hold is not None:
            hold.wait(30)  # a replica stuck mid-request (it leaves before answering)
            return
        served[name] += 1
        corr = json.loads(message.payload)["id"]
        host.publish(capsule, "resource.v1.response.read." + corr, '{"ok": true}', message.principal)

    host.bind(Binding(capsule, "resource.v1.request.read", answer))
    host.capsule_set = lambda: [f"docs@{GROUP}"]
    return host


def wait_for(check, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def groups_seen(mcp: NatsBus, host: NatsBus) -> bool:
    with mcp._members.lock:
        seen = mcp._members.hosts.get(host.host_id)
        return seen is not None and GROUP in seen.groups


def test_two_replicas_share_the_requests_and_each_request_is_served_once(server) -> None:
    mcp = bus(server, "mcp")
    served: Counter = Counter()
    first, second = replica(server, served, "first"), replica(server, served, "second")
    try:
        wait_for(lambda: groups_seen(mcp, first) and groups_seen(mcp, second))
        broker = host_participant("broker", "broker-src", publish=[REQUESTS], subscribe=[REPLIES])
        with mcp.subscribe(broker, "resource.v1.response.read.*", principal_scope=ALICE) as replies:
            for n in range(60):
                delivery = mcp.publish(broker, "resource.v1.request.read", json.dumps({"id": f"c{n}"}), ALICE)
                assert delivery.wait(5)  # the round ends when the group (one replica) reported
            answers = [replies.recv(5) for _ in range(60)]
            time.sleep(0.3)
            assert replies.poll() == []  # no request answered twice
        assert all(a is not None and a.source_id == GROUP for a in answers)
        topics = sorted(a.topic for a in answers if a is not None)
        assert topics == sorted(f"resource.v1.response.read.c{n}" for n in range(60))
        assert served["first"] + served["second"] == 60
        assert served["first"] > 0 and served["second"] > 0, served  # the load is shared
    finally:
        for one in (first, second, mcp):
            one.close()


def test_a_replica_joining_or_leaving_is_no_membership_change_the_last_one_leaving_is(server) -> None:
    mcp = bus(server, "mcp")
    changes: list[float] = []
    mcp.on_membership_change = lambda: changes.append(time.monotonic())
    served: Counter = Counter()
    first = replica(server, served, "first")
    try:
        wait_for(lambda: len(changes) == 1)  # the capsule appeared
        second = replica(server, served, "second")
        wait_for(lambda: groups_seen(mcp, second))
        second.close()
        wait_for(lambda: second.host_id not in mcp.hosts())
        time.sleep(1.5)  # a heartbeat more: still nothing
        assert len(changes) == 1
        first.close()
        wait_for(lambda: len(changes) == 2)  # the capsule is gone
    finally:
        first.close()
        mcp.close()


def test_a_replica_leaving_mid_request_has_it_served_by_the_other(server) -> None:
    mcp = bus(server, "mcp")
    served: Counter = Counter()
    stuck = threading.Event()
    first = replica(server, served, "stuck", hold=stuck)
    second = replica(server, served, "healthy")
    try:
        wait_for(lambda: groups_seen(mcp, first) and groups_seen(mcp, second))
        broker = host_participant("broker", "broker-src", publish=[REQUESTS], subscribe=[REPLIES])
        with mcp.subscribe(broker, "resource.v1.response.read.*", principal_scope=ALICE) as replies:
            deliveries = [
                mcp.publish(broker, "resource.v1.request.read", json.dumps({"id": f"c{n}"}), ALICE) for n in range(20)
            ]
            wait_for(lambda: served["healthy"] > 0)
            time.sleep(0.2)  # the stuck replica holds its share mid-request
            started = time.monotonic()
            threading.Thread(target=first.close, daemon=True).start()  # it leaves without answering
            answers: dict[str, Message] = {}
            while len(answers) < 20 and time.monotonic() - started < 2.5:  # inside the read window
                reply = replies.recv(0.1)
                if reply is not None:
                    answers[reply.topic] = reply
            assert len(answers) == 20, f"{len(answers)} of 20 answered"
            assert all(d.wait(5) for d in deliveries)
        assert served["healthy"] == 20
    finally:
        stuck.set()
        for one in (first, second, mcp):
            one.close()
