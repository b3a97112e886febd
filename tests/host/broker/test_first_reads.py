"""First reads (docs/contract/subscriptions.md §11.2): a subscribed URI no read of its owner answered yet is
read once, for the subscribing principal, so the files it depends on are watched; bounded and deduplicated.

The real broker on the real bus, stand-in capsules answering reads as a capsule does.
"""

from __future__ import annotations

import logging
import threading
import time

from astrid.host.broker import BrokerClient
from astrid.host.broker.answered import AnsweredReads
from astrid.host.broker.first_reads import FirstReads
from astrid.host.contract.outcomes import FailureCode, ReadOutcome
from tests.host.broker.fakes import ALICE, BOB, FakeCapsule, capsules_loaded, resource, template, text

NOTE = "astrid://notes/today"
PAGES = "astrid://notes/page/{name}"


def notes(bus, **extra) -> FakeCapsule:
    return FakeCapsule(
        bus,
        "notes",
        resources={"alice": [resource(NOTE)], "bob": [resource(NOTE)]},
        contents={"alice": {NOTE: [text(NOTE, "alice's")]}, "bob": {NOTE: [text(NOTE, "bob's")]}},
        templates={"alice": [template(PAGES)], "bob": [template(PAGES)]},
        **extra,
    )


def until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_subscription_to_an_unread_uri_reads_it_once_for_its_principal(threaded_bus, make_broker) -> None:
    capsule = notes(threaded_bus)
    broker, _ = make_broker(threaded_bus)
    alice, bob = BrokerClient(broker, ALICE), BrokerClient(broker, BOB)

    assert alice.subscribable(NOTE) == capsule.source_id
    assert alice.learned([NOTE])
    assert capsule.read_uris == [NOTE]
    assert (ALICE, NOTE, capsule.source_id) in broker.shared.answered
    assert (BOB, NOTE, capsule.source_id) not in broker.shared.answered  # alice's read is alice's only

    assert alice.subscribable(NOTE) == capsule.source_id  # known now: no second read
    assert alice.learned([NOTE]) and capsule.read_uris == [NOTE]
    assert bob.subscribable(NOTE) == capsule.source_id and bob.learned([NOTE])  # bob's own
    assert capsule.read_uris == [NOTE, NOTE] and broker.first_reads.done == 2

    # A rebuilt owner is another source-id: what its reads depend on is learned again.
    capsule.unload()
    rebuilt = notes(threaded_bus, source_id="src-notes-rebuilt")
    capsules_loaded(threaded_bus, ALICE)
    until(lambda: broker.listings.may_be_stale(ALICE))
    assert alice.subscribable(NOTE) == rebuilt.source_id and alice.learned([NOTE])
    assert rebuilt.read_uris == [NOTE]


def test_a_uri_read_already_gets_no_first_read(threaded_bus, make_broker) -> None:
    capsule = notes(threaded_bus)
    broker, _ = make_broker(threaded_bus)
    alice = BrokerClient(broker, ALICE)
    assert alice.read(NOTE).result().error is None  # a client read it: its files are watched
    assert alice.subscribable(NOTE) == capsule.source_id and alice.learned([NOTE])
    assert capsule.read_uris == [NOTE] and broker.first_reads.done == 0


def test_first_reads_are_bounded_in_concurrency_and_queue_and_deduplicated(threaded_bus, make_broker, caplog) -> None:
    hang = threading.Event()
    capsule = notes(threaded_bus, hang=hang)
    broker, _ = make_broker(threaded_bus)
    first = FirstReads(broker.reads, broker.shared.answered, per_principal=3, workers=1, queued=4)
    pages = [f"astrid://notes/page/{n}" for n in range(6)]
    theirs = [f"astrid://notes/page/b{n}" for n in range(3)]
    try:
        with caplog.at_level(logging.WARNING, logger="astrid.host.broker"):
            first.start(ALICE, pages[0], capsule.source_id)
            until(lambda: capsule.reads == 1)  # its read hangs in the capsule
            for uri in pages[1:]:  # alice may have 3 waiting or under way: 2 more, 3 dropped
                first.start(ALICE, uri, capsule.source_id)
            first.start(ALICE, pages[1], capsule.source_id)  # waiting already: the same read
            for uri in theirs:  # the queue holds 4: bob's first 2 fit, the third is dropped
                first.start(BOB, uri, capsule.source_id)
            assert first.dropped == 4
            assert not first.wait(ALICE, pages, 0.2)  # still under way
            assert capsule.reads == 1  # one at a time: the others wait for the hung one
            hang.set()  # the capsule answers nothing now: each read ends at once (owner silent)
            assert first.wait(ALICE, pages, 10) and first.wait(BOB, theirs, 10)
        assert sorted(capsule.read_uris) == sorted([*pages[:3], *theirs[:2]])
        assert first.done == 5
        lines = [r.getMessage() for r in caplog.records if "wait for a first read" in r.getMessage()]
        assert len(lines) == 1  # said at most once a minute
    finally:
        first.close()


def test_principals_waiting_for_first_reads_take_turns(threaded_bus, make_broker) -> None:
    hang = threading.Event()
    capsule = notes(threaded_bus, hang=hang)
    broker, _ = make_broker(threaded_bus)
    first = FirstReads(broker.reads, broker.shared.answered, per_principal=256, workers=1)
    many = [f"astrid://notes/page/{n}" for n in range(20)]
    try:
        first.start(ALICE, many[0], capsule.source_id)
        until(lambda: capsule.reads == 1)  # alice's first hangs: the rest wait
        for uri in many[1:]:
            first.start(ALICE, uri, capsule.source_id)
        first.start(BOB, "astrid://notes/page/bob", capsule.source_id)  # after alice's 19
        hang.set()
        assert first.wait(BOB, ["astrid://notes/page/bob"], 10)
        assert first.wait(ALICE, many, 10)
        # bob's read came after one more of alice's, not after all of them
        assert capsule.read_uris.index("astrid://notes/page/bob") == 2
    finally:
        first.close()


def test_answered_reads_are_bounded_as_the_kernels_record_of_touched_files_is() -> None:
    answered = AnsweredReads(per_sandbox=2, max_entries=3)
    for n in range(3):
        answered.note(ALICE, f"astrid://notes/{n}", ReadOutcome(source_id="src-notes"))
    assert [(ALICE, f"astrid://notes/{n}", "src-notes") in answered for n in range(3)] == [False, True, True]
    answered.note(BOB, "astrid://notes/0", ReadOutcome(source_id="src-notes"))  # bob's sandbox is his own
    answered.note(ALICE, "astrid://other/0", ReadOutcome(source_id="src-other"))  # 4 in all: the oldest goes
    assert (ALICE, "astrid://notes/1", "src-notes") not in answered
    assert (BOB, "astrid://notes/0", "src-notes") in answered
    answered.note(ALICE, "astrid://notes/9", ReadOutcome.fail(FailureCode.TIMEOUT, "no owner answered"))
    assert not any((ALICE, "astrid://notes/9", source) in answered for source in ("src-notes", "src-other"))
