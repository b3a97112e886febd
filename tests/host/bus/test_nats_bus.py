"""The bus across processes: two NatsBus instances on a real nats-server (loopback)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.errors import BadSubjectError

from astrid.host.bus import Binding, Dispatcher, Principal, host_participant
from astrid.host.bus.nats import NatsBus, membership, reports, subject_for
from astrid.host.bus.nats.connection import Connection
from astrid.host.bus.nats.groups import QueueGroups
from astrid.host.contract.topics import HOST_CLUSTER
from astrid.host.errors import BusError
from astrid.host.tuning import NATS_TUNING
from tests.support.nats import NatsServer, nats_server

ALICE = Principal.verified("alice")
REQUESTS, REPLIES = "resource.v1.request.*", "resource.v1.response.*"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path) as running:
        yield running


def bus(server: NatsServer, role: str) -> NatsBus:
    listen = (REPLIES,) if role == "mcp" else (REQUESTS,)
    return NatsBus(
        server.url(), role=role, cluster=HOST_CLUSTER, shared=(REQUESTS, REPLIES), listen=listen, tracked=(REQUESTS,)
    ).connect()


@pytest.fixture
def pair(server: NatsServer) -> Iterator[tuple[NatsBus, NatsBus]]:
    mcp, host = bus(server, "mcp"), bus(server, "capsules")
    deadline = time.monotonic() + 5
    while host.host_id not in mcp.hosts() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield mcp, host
    mcp.close()
    host.close()


def test_a_trailing_star_becomes_a_nats_wildcard() -> None:
    assert subject_for("resource.v1.request.*") == "resource.v1.request.>"
    assert subject_for("resource.v1.request.read") == "resource.v1.request.read"


def test_a_request_reaches_the_other_host_and_its_reply_comes_back_stamped_there(pair) -> None:
    mcp, host = pair
    capsule = host_participant("capsule", "capsule-src", publish=[REPLIES], subscribe=[REQUESTS])
    seen: list = []

    def answer(message) -> None:
        seen.append(message)
        host.publish(capsule, "resource.v1.response.read.c1", '{"uri": "x"}', message.principal)

    host.bind(Binding(capsule, "resource.v1.request.read", answer))
    broker = host_participant("broker", "broker-src", publish=[REQUESTS], subscribe=[REPLIES])
    with mcp.subscribe(broker, "resource.v1.response.read.c1", principal_scope=ALICE) as replies:
        delivery = mcp.publish(broker, "resource.v1.request.read", '{"uri": "x"}', ALICE)
        assert delivery.wait(5)  # the other host reported that its handlers finished
        assert "capsule-src" in delivery.reached
        reply = replies.recv(5)
    assert reply is not None and reply.source_id == "capsule-src" and reply.principal == ALICE
    assert seen[0].source_id == "broker-src" and seen[0].principal == ALICE


def test_the_envelope_comes_from_the_publishing_host_never_the_payload(pair) -> None:
    mcp, host = pair
    got: list = []
    capsule = host_participant("capsule", "capsule-src", subscribe=[REQUESTS])
    host.bind(Binding(capsule, "resource.v1.request.read", got.append))
    broker = host_participant("broker", "broker-src", publish=[REQUESTS])
    forged = '{"uri": "x", "principal": "bob", "source_id": "someone-else"}'
    mcp.publish(broker, "resource.v1.request.read", forged, ALICE).wait(5)
    assert got[0].principal == ALICE and got[0].source_id == "broker-src"


def test_host_topics_stay_in_their_process(pair) -> None:
    mcp, host = pair
    got: list = []
    listener = host_participant("kernel", "kernel-src", subscribe=["astrid.v1.*"])
    host.bind(Binding(listener, "astrid.v1.capsules_loaded", got.append))
    kernel = host_participant("kernel", "kernel-mcp", publish=["astrid.v1.*"])
    mcp.publish(kernel, "astrid.v1.capsules_loaded", '{"capsules": []}', ALICE)
    time.sleep(0.5)
    assert got == []


def test_a_round_ends_when_every_known_host_reported_and_a_silent_one_costs_the_window(pair, server) -> None:
    mcp, host = pair
    broker = host_participant("broker", "broker-src", publish=[REQUESTS])
    started = time.monotonic()
    assert mcp.publish(broker, "resource.v1.request.describe", "{}", ALICE).wait(5)
    assert time.monotonic() - started < 1.0  # no capsule there: the host reports at once
    release = threading.Event()
    slow = host_participant("slow", "slow-src", subscribe=[REQUESTS])

    def hang(message) -> None:
        release.wait(3)

    host.bind(Binding(slow, "resource.v1.request.describe", hang))
    assert not mcp.publish(broker, "resource.v1.request.describe", "{}", ALICE).wait(0.5)
    release.set()


class OnThreads(Dispatcher):
    """Each handler on a thread of its own, as the kernel's pool runs them: the NATS loop stays free."""

    def dispatch(self, runs, delivery) -> None:
        for binding, message in runs:

            def run(binding=binding, message=message) -> None:
                try:
                    binding.handler(message)
                finally:
                    delivery.handler_finished()

            threading.Thread(target=run, name="handler", daemon=True).start()


def test_a_host_reports_after_the_report_wait_at_the_latest_with_no_thread_per_message(pair, monkeypatch) -> None:
    mcp, host = pair
    monkeypatch.setattr(reports, "NATS_TUNING", dataclasses.replace(reports.NATS_TUNING, report_wait_s=2.0))
    host.dispatcher = OnThreads()
    running, release = threading.Semaphore(0), threading.Event()

    def hang(message) -> None:
        running.release()
        release.wait(10)

    host.bind(Binding(host_participant("slow", "slow-src", subscribe=[REQUESTS]), "resource.v1.request.describe", hang))
    broker = host_participant("broker", "broker-src", publish=[REQUESTS])
    before = set(threading.enumerate())
    try:
        deliveries = [mcp.publish(broker, "resource.v1.request.describe", "{}", ALICE) for _ in range(20)]
        assert all(running.acquire(timeout=5) for _ in deliveries)
        started = [t.name for t in threading.enumerate() if t not in before]
        assert started == ["handler"] * 20  # the handlers' own threads, and nothing waiting on them
        assert all(delivery.wait(5) for delivery in deliveries)  # reported while the handlers still run
        assert all("slow-src" in delivery.reached for delivery in deliveries)
    finally:
        release.set()


@pytest.mark.parametrize("handlers", ["inline on the NATS loop", "on threads of their own"])
@pytest.mark.parametrize("serving", ["alone", "in its queue group"])
def test_a_done_report_never_overtakes_the_replies_its_handlers_published(pair, handlers, serving) -> None:
    """The broker ends a read's drain once the round is done: the owner's reply must be in its
    queue by then, or the owner is called silent (docs/nats.md#report-order). In its queue group
    the capsule's host claims each request first, so the report's subscription is awake already
    when the reply comes in."""
    mcp, host = pair
    if handlers != "inline on the NATS loop":
        host.dispatcher = OnThreads()
    capsule = host_participant("capsule", "capsule-src", publish=[REPLIES], subscribe=[REQUESTS])

    def answer(message) -> None:
        time.sleep(0.002)  # a capsule call takes a while: the loop goes on meanwhile
        host.publish(capsule, "resource.v1.response.read." + json.loads(message.payload), "{}", message.principal)

    host.bind(Binding(capsule, "resource.v1.request.read", answer))
    if serving == "in its queue group":
        host.capsule_set = lambda: ["capsule@capsule-src"]
        deadline = time.monotonic() + 10
        while "capsule-src" not in mcp._members.served_groups() and time.monotonic() < deadline:
            time.sleep(0.05)
    broker = host_participant("broker", "broker-src", publish=[REQUESTS], subscribe=[REPLIES])
    with mcp.subscribe(broker, "resource.v1.response.read.*", principal_scope=ALICE) as replies:
        for n in range(50):
            queued: list[str] = []
            seen = threading.Event()

            def finished(queued=queued, seen=seen) -> None:  # where the round is done: on the NATS loop
                queued.extend(reply.topic for reply in replies.poll())
                seen.set()

            mcp.publish(broker, "resource.v1.request.read", f'"c{n}"', ALICE).when_finished(finished)
            assert seen.wait(5)
            assert queued == [f"resource.v1.response.read.c{n}"], (n, queued)


def test_a_round_across_hosts_calls_back_once_when_every_host_reported(pair) -> None:
    mcp, host = pair
    host.dispatcher = OnThreads()
    release = threading.Event()
    slow = host_participant("slow", "slow-src", subscribe=[REQUESTS])

    def hang(message) -> None:
        release.wait(5)

    host.bind(Binding(slow, "resource.v1.request.describe", hang))
    broker = host_participant("broker", "broker-src", publish=[REQUESTS])
    delivery = mcp.publish(broker, "resource.v1.request.describe", "{}", ALICE)
    calls: list[bool] = []
    called = threading.Event()

    def finished() -> None:
        calls.append(delivery.finished)
        called.set()

    delivery.when_finished(finished)
    assert not called.wait(0.3)  # here it is done at once; the other host's handler still runs
    release.set()
    assert called.wait(5)
    time.sleep(0.2)
    assert calls == [True]  # once, and finished by then


def test_membership_follows_heartbeats_and_goodbyes(server) -> None:
    mcp = bus(server, "mcp")
    changes = threading.Event()
    mcp.on_membership_change = changes.set
    host = bus(server, "capsules")
    host.capsule_set = lambda: ["docs@abc"]
    try:
        assert changes.wait(5) and host.host_id in mcp.hosts()
        changes.clear()
        host.close()
        assert changes.wait(5) and host.host_id not in mcp.hosts()
    finally:
        mcp.close()


def test_a_host_whose_capsule_set_changed_beats_at_once_not_at_the_next_heartbeat(server, monkeypatch) -> None:
    """A reload's new build answers at once: the front ends must hear of it then, not a heartbeat
    later (with beats 60 s apart here, only the early beat can bring the change within the wait)."""
    monkeypatch.setattr(membership, "NATS_TUNING", dataclasses.replace(NATS_TUNING, heartbeat_s=60.0))
    mcp, host = bus(server, "mcp"), bus(server, "capsules")
    changes = threading.Event()
    mcp.on_membership_change = changes.set
    try:
        deadline = time.monotonic() + 5
        while host.host_id not in mcp.hosts() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mcp.hosts().get(host.host_id) == ()
        changes.clear()
        host.capsule_set = lambda: ["docs@new-build"]
        host.capsule_set_changed()
        assert changes.wait(10) and mcp.hosts()[host.host_id] == ("docs@new-build",)
    finally:
        host.close()
        mcp.close()


def test_a_host_announces_who_its_capsules_are_and_a_changed_claim_is_heard_as_a_change(server) -> None:
    """Each signed capsule's claim travels with the set (the front end verifies it: identity.vetting);
    a claim that changes while the set does not still makes the front end re-describe, since who a
    capsule is decides what it may serve."""
    mcp = bus(server, "mcp")
    changes = threading.Event()
    mcp.on_membership_change = changes.set
    host = bus(server, "capsules")
    host.capsule_set = lambda: ["docs@abc"]
    host.capsule_claims = lambda: {"abc": "claim-1"}
    try:
        assert changes.wait(5) and mcp.claims_of("abc") == ("claim-1",)
        assert mcp.claims_of("unknown") == ()
        changes.clear()
        host.capsule_claims = lambda: {"abc": "claim-2"}
        host.capsule_set_changed()
        assert changes.wait(5) and mcp.claims_of("abc") == ("claim-2",)
        changes.clear()
        host.close()
        assert changes.wait(5) and mcp.claims_of("abc") == ()  # gone with its host
    finally:
        mcp.close()


def test_a_heartbeat_with_malformed_claims_keeps_the_host_and_drops_the_claims(server) -> None:
    mcp = bus(server, "mcp")
    try:
        for claims in ([1, 2], {"abc": 3}, "text"):
            beat = {"host": "h" * 32, "role": "capsules", "capsules": ["docs@abc"], "claims": claims}
            mcp._members.on_heartbeat(json.dumps(beat).encode())
            assert "h" * 32 in mcp.hosts() and mcp.claims_of("abc") == ()
    finally:
        mcp.close()


def test_a_host_heard_from_before_its_heartbeat_announced_anything_still_changes_the_set_when_it_leaves(
    server,
) -> None:
    """A capsule answers as soon as it loads, which may be before the heartbeat that announces it
    (up to `heartbeat_s`); the client lists it. When that host leaves before announcing, the
    others must still see the capsule set change, or the client keeps a capsule that is gone."""
    mcp = bus(server, "mcp")
    changes = threading.Event()
    mcp.on_membership_change = changes.set
    host = bus(server, "capsules")  # announces no capsule: its heartbeats say []
    try:
        capsule = host_participant("capsule", "capsule-src", publish=[REPLIES], subscribe=[REQUESTS])

        def answer(message) -> None:
            host.publish(capsule, "resource.v1.response.read.c1", "{}", message.principal)

        host.bind(Binding(capsule, "resource.v1.request.read", answer))
        broker = host_participant("broker", "broker-src", publish=[REQUESTS], subscribe=[REPLIES])
        with mcp.subscribe(broker, "resource.v1.response.read.c1", principal_scope=ALICE) as replies:
            mcp.publish(broker, "resource.v1.request.read", "{}", ALICE).wait(5)
            assert replies.recv(5) is not None
        assert host.host_id in mcp.hosts() and mcp.hosts()[host.host_id] == ()
        changes.clear()
        host.close()  # its goodbye
        assert changes.wait(5), "the capsule heard from that host left with it, unnoticed"
    finally:
        host.close()
        mcp.close()


def test_a_host_keeps_beating_when_its_queue_groups_cannot_be_updated(server, monkeypatch, caplog) -> None:
    """Any failure of the queue-group update (a NATS error mid-reconnect, say) used to end the
    heartbeat task for good: the host went on serving, and every other host took it for dead."""

    async def failing_sync(self, wanted: set[str]) -> None:
        raise RuntimeError("subscribe refused")

    monkeypatch.setattr(QueueGroups, "sync", failing_sync)
    mcp = bus(server, "mcp")
    host = bus(server, "capsules")  # a capsule host: it runs its capsules' queue groups
    try:
        time.sleep(NATS_TUNING.host_timeout_s + 1.5)  # past the time a silent host is gone
        assert host.host_id in mcp.hosts(), "the host stopped beating"
        warned = [r.getMessage() for r in caplog.records if "queue groups" in r.getMessage()]
        assert len(warned) == 1 and "subscribe refused" in warned[0]  # once, not once per beat
    finally:
        host.close()
        mcp.close()


def test_a_queue_group_that_fails_to_join_leaves_no_subscription_behind(server) -> None:
    """A group joined halfway (its second subscription refused) kept the first, unrecorded: it
    took its share of the group's requests for good, for a group this host was not in."""
    heard: list[str] = []

    async def on_message(msg, group: str) -> None:
        heard.append(group)

    async def unused(msg) -> None:
        pass

    connection = Connection(server.url(), None)
    connection.open((), unused, 5)  # no subjects of its own
    try:
        groups = QueueGroups(connection, ("test.work.*", ""), on_message)  # "": nats-py refuses the subject
        with pytest.raises(BadSubjectError):
            connection.call(groups.sync({"capsule-src"}), 5)
        assert groups.grouped == frozenset()

        async def request() -> None:
            await connection.client.publish("test.work.one", b"{}")
            await connection.client.flush()

        connection.call(request(), 5)
        time.sleep(0.3)
        assert heard == [], "a subscription of the failed join still takes the group's requests"
    finally:
        connection.close(lambda: asyncio.sleep(0))


def test_an_unreachable_server_or_a_bad_url_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BusError, match="cannot connect to the NATS server"):
        NatsBus("nats://127.0.0.1:1", role="mcp", cluster=HOST_CLUSTER).connect(timeout_s=1)
    with pytest.raises(BusError, match="nats://"):
        NatsBus("http://example.com", role="mcp", cluster=HOST_CLUSTER)


def test_a_nats_restart_fails_requests_fast_then_service_resumes(tmp_path: Path) -> None:
    with nats_server(tmp_path) as first:
        port = first.port
        mcp, host = bus(first, "mcp"), bus(first, "capsules")
    # the server is gone: a request fails at once with a clear error, never hangs
    try:
        broker = host_participant("broker", "broker-src", publish=[REQUESTS])
        started = time.monotonic()
        with pytest.raises(BusError, match="unreachable"):
            for _ in range(50):  # the client notices the drop within moments
                mcp.publish(broker, "resource.v1.request.read", "{}", ALICE)
                time.sleep(0.1)
        assert time.monotonic() - started < 6
        with nats_server(tmp_path, port=port):
            deadline = time.monotonic() + 15
            while not (mcp.connected and host.connected and host.host_id in mcp.hosts()):
                assert time.monotonic() < deadline, "no reconnect within 15 s"
                time.sleep(0.1)
            got: list = []
            capsule = host_participant("capsule", "capsule-src", subscribe=[REQUESTS])
            host.bind(Binding(capsule, "resource.v1.request.read", got.append))
            assert mcp.publish(broker, "resource.v1.request.read", "{}", ALICE).wait(5)
            assert [m.source_id for m in got] == ["broker-src"]
    finally:
        mcp.close()
        host.close()
