"""Capsule calls run in lanes per (capsule, principal): one principal's flood holds one worker."""

from __future__ import annotations

import threading

from astrid.host.bus import Binding, InMemoryBus, Principal, host_participant
from astrid.host.kernel.dispatch import PoolDispatcher

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")


def _setup(workers: int, stale_after_s: float = 30.0):
    dispatcher = PoolDispatcher(capsule_workers=workers, stale_after_s=stale_after_s)
    bus = InMemoryBus(dispatcher)
    capsule = host_participant("slow", "src-slow", subscribe=["work.*"])
    sender = host_participant("sender", "src-sender", publish=["work.*"])
    return dispatcher, bus, capsule, sender


def test_a_flood_of_one_principal_leaves_workers_for_another():
    dispatcher, bus, capsule, sender = _setup(workers=2)
    release = threading.Event()
    ran: list[str] = []

    def handler(message):
        ran.append(str(message.principal.name))
        if message.principal == ALICE:
            release.wait(10)  # alice's calls hang until released

    bus.bind(Binding(capsule, "work.*", handler, is_capsule=True))
    try:
        floods = [bus.publish(sender, "work.x", "{}", ALICE) for _ in range(10)]
        bob = bus.publish(sender, "work.x", "{}", BOB)
        # bob's call runs while alice's first call still hangs and nine wait in her lane
        assert bob.wait(5), "bob's call waited behind alice's flood"
        assert ran.count("alice") == 1
    finally:
        release.set()
    assert all(delivery.wait(10) for delivery in floods)
    assert ran.count("alice") == 10  # her calls ran, in order, one at a time
    dispatcher.close()


def test_calls_of_one_lane_never_overlap():
    dispatcher, bus, capsule, sender = _setup(workers=4)
    active, overlaps = [0], [0]
    lock = threading.Lock()

    def handler(message):
        with lock:
            active[0] += 1
            overlaps[0] = max(overlaps[0], active[0])
        threading.Event().wait(0.005)
        with lock:
            active[0] -= 1

    bus.bind(Binding(capsule, "work.*", handler, is_capsule=True))
    deliveries = [bus.publish(sender, "work.x", "{}", ALICE) for _ in range(20)]
    assert all(delivery.wait(10) for delivery in deliveries)
    assert overlaps[0] == 1
    dispatcher.close()


def test_a_call_that_waited_past_its_staleness_is_dropped_unrun():
    dispatcher, bus, capsule, sender = _setup(workers=2, stale_after_s=0.05)
    release = threading.Event()
    ran: list[int] = []

    def handler(message):
        ran.append(1)
        release.wait(10)

    bus.bind(Binding(capsule, "work.*", handler, is_capsule=True))
    first = bus.publish(sender, "work.x", "{}", ALICE)
    late = bus.publish(sender, "work.x", "{}", ALICE)
    threading.Event().wait(0.2)  # the second call goes stale in the lane
    release.set()
    assert first.wait(5) and late.wait(5)  # both deliveries finish: the publisher is never left waiting
    assert len(ran) == 1 and dispatcher.dropped == 1
    dispatcher.close()
