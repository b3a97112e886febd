"""One read as the broker hands it out (`Reads.start` -> `read.Read`): settled at once, its round
in flight, or left to a thread; driven as the MCP server's event loop drives it, or waited for.
Both ways serve the same answer, and a waiter is woken at the reply or when every capsule
finished, never only at the window's end."""

from __future__ import annotations

import threading
import time

from astrid.host.broker.read import Read
from astrid.host.bus import Principal
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from astrid.host.limits import Limits
from tests.host.broker.fakes import FakeCapsule, resource, text

ALICE = Principal.verified("alice")
URI = "astrid://notes/me"


def start(broker, uri: str = URI, principal: Principal = ALICE) -> tuple[Read, list[ReadOutcome]]:
    """A read started as a client starts it; and what its `done` heard."""
    ended: list[ReadOutcome] = []
    read = broker.reads.start(
        principal, uri, failed=lambda exc: ReadOutcome.fail(FailureCode.INTERNAL, str(exc)), done=ended.append
    )
    return read, ended


def driven(read: Read) -> tuple[ReadOutcome, list[bool]]:
    """Wait as the loop does (a wake, or the time `wait_s` allows); the outcome and, per wait,
    whether a wake ended it."""
    woken = threading.Event()
    read.notify(woken.set)
    waits: list[bool] = []
    try:
        while (wait_s := read.wait_s()) is not None:
            waits.append(woken.wait(wait_s))
            woken.clear()
        outcome = read.settled()
        return (outcome if outcome is not None else read.finish()), waits
    finally:
        read.close()


def test_a_driven_read_serves_what_a_waited_read_serves(bus, make_broker):
    FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "mine")]}})
    # another capsule answers the URI too, first: never a substitute for the listed owner
    FakeCapsule(bus, "forger", source_id="a-forger", contents={"alice": {URI: [text(URI, "FORGED")]}})
    broker, _ = make_broker(bus)
    broker.listings.snapshot(ALICE)
    waited = start(broker)[0].result()
    read, ended = start(broker)
    outcome, _ = driven(read)
    assert outcome.error is None and outcome.source_id == waited.source_id == "src-notes"
    assert [c.text for c in outcome.contents] == [c.text for c in waited.contents] == ["mine"]
    assert ended == [outcome]  # reported once


def test_a_read_no_snapshot_can_route_is_left_whole_to_a_thread(bus, make_broker):
    notes = FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "a")]}})
    broker, _ = make_broker(bus)
    read, ended = start(broker)  # the principal's first read: who lists what is learnt first, by a round
    assert read.wait_s() is None and read.settled() is None and notes.describes == 0 and ended == []
    outcome = read.finish()
    assert outcome.error is None and [c.text for c in outcome.contents] == ["a"] and notes.describes == 1
    assert ended == [outcome]


def test_a_refused_read_is_settled_at_once_and_asks_nobody(bus, make_broker):
    notes = FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "a")]}})
    broker, _ = make_broker(bus)
    for principal in (Principal.claimed("alice"), Principal.system()):
        read, ended = start(broker, principal=principal)
        assert read.wait_s() is None
        outcome = read.settled()
        assert outcome is not None and outcome.error is not None and outcome.error.code is FailureCode.DENIED
        assert ended == [outcome]
    assert notes.reads == 0 and notes.describes == 0


def test_an_owner_that_finishes_without_answering_wakes_the_waiter_long_before_the_window(threaded_bus, make_broker):
    thinking = threading.Event()  # the read handler returns, with no reply, once this is set
    FakeCapsule(threaded_bus, "notes", resources={"alice": [resource(URI)]}, hang=thinking)  # lists it, serves nothing
    broker, _ = make_broker(threaded_bus, Limits(read_window_s=10.0))
    broker.listings.snapshot(ALICE)
    read, _ = start(broker)
    threading.Timer(0.2, thinking.set).start()
    began = time.monotonic()
    outcome, waits = driven(read)
    assert time.monotonic() - began < 5.0
    assert waits and all(waits)  # each wait ended by a wake, none by its time
    assert outcome.error is not None and "finished without answering the read" in outcome.error.message


def test_a_gone_owner_goes_on_with_a_describe_round_as_the_waited_read_does(bus, make_broker):
    notes = FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "a")]}})
    broker, _ = make_broker(bus)
    broker.listings.snapshot(ALICE)
    notes.unload()  # gone, and the snapshot does not know it yet
    read, _ = start(broker)
    assert read.wait_s() is None and read.settled() is None  # nothing to wait for: a describe is due
    outcome = read.finish()
    read.close()
    assert outcome.error is not None and outcome.error.code == "not_found"
    assert outcome.error.message == start(broker)[0].result().error.message


def test_a_broker_failure_under_a_read_is_its_outcome(bus, make_broker, monkeypatch):
    FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "a")]}})
    broker, _ = make_broker(bus)

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(broker.listings, "snapshot", boom)
    read, ended = start(broker)
    outcome = read.result()
    assert outcome.error is not None and outcome.error.code is FailureCode.INTERNAL and "boom" in outcome.error.message
    assert ended == [outcome]
