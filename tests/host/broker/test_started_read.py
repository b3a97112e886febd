"""A read started without waiting (`Broker.start_read`), driven as the MCP server's event loop
drives it: it serves what the blocking read serves, and wakes its waiter at the reply or when
every capsule finished, never only at the window's end."""

from __future__ import annotations

import threading
import time

from astrid.host.broker.read_reply import ReadOutcome
from astrid.host.broker.started_read import StartedRead
from astrid.host.bus import Principal
from astrid.host.limits import Limits
from tests.host.broker.fakes import FakeCapsule, resource, text

ALICE = Principal.verified("alice")
URI = "astrid://notes/me"


def driven(started: StartedRead) -> tuple[ReadOutcome, list[bool]]:
    """Wait as the loop does (a wake, or the time `wait_s` allows); the outcome and, per wait,
    whether a wake ended it."""
    woken = threading.Event()
    started.notify(woken.set)
    waits: list[bool] = []
    try:
        while (wait_s := started.wait_s()) is not None:
            waits.append(woken.wait(wait_s))
            woken.clear()
        outcome = started.outcome()
        return (outcome if outcome is not None else started.finish()), waits
    finally:
        started.close()


def test_a_started_read_serves_what_the_blocking_read_serves(bus, make_broker):
    FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "mine")]}})
    # another capsule answers the URI too, first: never a substitute for the listed owner
    FakeCapsule(bus, "forger", source_id="a-forger", contents={"alice": {URI: [text(URI, "FORGED")]}})
    broker, _ = make_broker(bus)
    broker.snapshot(ALICE)  # the fresh snapshot a started read needs
    blocking = broker.read_resource(ALICE, URI)
    started = broker.start_read(ALICE, URI)
    assert started is not None
    outcome, _ = driven(started)
    assert outcome.error is None and outcome.source_id == blocking.source_id == "src-notes"
    assert [c.text for c in outcome.contents] == [c.text for c in blocking.contents] == ["mine"]


def test_no_started_read_without_a_fresh_snapshot_or_for_an_unlisted_uri(bus, make_broker):
    FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "mine")]}})
    broker, _ = make_broker(bus)
    assert broker.start_read(ALICE, URI) is None  # the first read learns who lists what: a round
    broker.snapshot(ALICE)
    assert broker.start_read(ALICE, "astrid://notes/unlisted") is None
    assert broker.start_read(Principal.claimed("alice"), URI) is None
    broker.invalidate(ALICE)
    assert broker.start_read(ALICE, URI) is None


def test_an_owner_that_finishes_without_answering_wakes_the_waiter_long_before_the_window(threaded_bus, make_broker):
    thinking = threading.Event()  # the read handler returns, with no reply, once this is set
    FakeCapsule(threaded_bus, "notes", resources={"alice": [resource(URI)]}, hang=thinking)  # lists it, serves nothing
    broker, _ = make_broker(threaded_bus, Limits(read_window_s=10.0))
    broker.snapshot(ALICE)
    started = broker.start_read(ALICE, URI)
    assert started is not None
    threading.Timer(0.2, thinking.set).start()
    began = time.monotonic()
    outcome, waits = driven(started)
    assert time.monotonic() - began < 5.0
    assert waits and all(waits)  # each wait ended by a wake, none by its time
    assert outcome.error is not None and "finished without answering the read" in outcome.error.message


def test_a_gone_owner_goes_on_with_a_describe_round_as_the_blocking_read_does(bus, make_broker):
    notes = FakeCapsule(bus, "notes", resources={"alice": [resource(URI)]}, contents={"alice": {URI: [text(URI, "a")]}})
    broker, _ = make_broker(bus)
    broker.snapshot(ALICE)
    notes.unload()  # gone, and the snapshot does not know it yet
    started = broker.start_read(ALICE, URI)
    assert started is not None
    assert started.wait_s() is None and started.outcome() is None  # nothing to wait for: a describe is due
    outcome = started.finish()
    started.close()
    assert outcome.error is not None and outcome.error.code == "not_found"
    assert outcome.error.message == broker.read_resource(ALICE, URI).error.message
