"""Capsule calls run in lanes per (capsule, principal), and the lanes share the workers fairly.

One principal's flood holds one worker; a capsule runs on at most half the
workers; lanes take turns, one call each; every call finishes its delivery
exactly once, also when it is dropped or the dispatcher closes under it.
"""

from __future__ import annotations

import itertools
import threading

from astrid.host.bus import Binding, InMemoryBus, InMemoryDelivery, Message, Principal, host_participant
from astrid.host.kernel.dispatch import PoolDispatcher
from astrid.host.tuning import KERNEL_TUNING

ALICE = Principal.verified("alice")
BOB = Principal.verified("bob")
CAROL = Principal.verified("carol")
SENDER = host_participant("sender", "src-sender", publish=["work.*"])


def _setup(workers: int, stale_after_s: float = 30.0):
    dispatcher = PoolDispatcher(capsule_workers=workers, stale_after_s=stale_after_s)
    bus = InMemoryBus(dispatcher)
    capsule = host_participant("slow", "src-slow", subscribe=["work.*"])
    return dispatcher, bus, capsule, SENDER


class Running:
    """How many calls run at once (now and at most), and a way to wait until `n` have started."""

    def __init__(self) -> None:
        self.now = self.most = self.started = 0
        self._cond = threading.Condition()

    def enter(self) -> None:
        with self._cond:
            self.now += 1
            self.started += 1
            self.most = max(self.most, self.now)
            self._cond.notify_all()

    def leave(self) -> None:
        with self._cond:
            self.now -= 1

    def handler(self, release: threading.Event | None = None):
        """A handler that counts its calls and hangs until `release` (if given) is set."""

        def run(message: Message) -> None:
            self.enter()
            if release is not None:
                release.wait(10)
            self.leave()

        return run

    def wait_started(self, n: int, timeout_s: float = 5) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.started >= n, timeout_s)


class Counted(InMemoryDelivery):
    """A delivery that counts its `handler_finished()` calls."""

    def __init__(self, message: Message, runs: list[tuple[Binding, Message]]) -> None:
        super().__init__(message, runs)
        self.finishes = 0

    def handler_finished(self) -> None:
        self.finishes += 1
        super().handler_finished()


_seq = itertools.count()


def _dispatch(dispatcher: PoolDispatcher, binding: Binding, principal: Principal) -> Counted:
    """Dispatch one message to `binding` as `principal`, as the bus would, with a counting delivery."""
    message = Message("work.x", "{}", SENDER.source_id, principal, "2026-01-01T00:00:00.000Z", next(_seq))
    delivery = Counted(message, [(binding, message)])
    dispatcher.dispatch([(binding, message)], delivery)
    return delivery


def test_a_flood_of_one_principal_leaves_workers_for_another():
    dispatcher, bus, capsule, sender = _setup(workers=4)  # a capsule's share: 2 workers
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


def test_calls_of_one_lane_never_overlap_and_run_in_order():
    dispatcher, bus, capsule, sender = _setup(workers=4)
    running = Running()
    order: list[int] = []

    def handler(message):
        running.enter()
        order.append(int(message.payload))
        threading.Event().wait(0.005)
        running.leave()

    bus.bind(Binding(capsule, "work.*", handler, is_capsule=True))
    deliveries = [bus.publish(sender, "work.x", str(n), ALICE) for n in range(20)]
    assert all(delivery.wait(10) for delivery in deliveries)
    assert running.most == 1 and order == list(range(20))
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


def test_a_call_past_the_lane_depth_is_dropped_at_once():
    dispatcher, bus, capsule, sender = _setup(workers=1)
    release = threading.Event()
    running = Running()

    bus.bind(Binding(capsule, "work.*", running.handler(release), is_capsule=True))
    try:
        first = bus.publish(sender, "work.x", "{}", ALICE)
        assert running.wait_started(1)
        queued = [bus.publish(sender, "work.x", "{}", ALICE) for _ in range(KERNEL_TUNING.lane_depth)]
        over = bus.publish(sender, "work.x", "{}", ALICE)
        assert over.wait(0) and dispatcher.dropped == 1  # finished, unrun, without waiting for the lane
    finally:
        release.set()
    assert first.wait(5) and all(delivery.wait(10) for delivery in queued)
    assert running.started == 1 + KERNEL_TUNING.lane_depth
    dispatcher.close()


def test_a_capsule_never_holds_more_than_its_share_and_another_capsule_runs_at_once():
    dispatcher, bus, slow, sender = _setup(workers=4)  # a capsule's share: 2 workers
    fast = host_participant("fast", "src-fast", subscribe=["work.*"])
    release = threading.Event()
    hanging, quick = Running(), Running()

    bus.bind(Binding(slow, "work.*", hanging.handler(release), is_capsule=True))
    bus.bind(Binding(fast, "work.*", quick.handler(), is_capsule=True))
    principals = [Principal.verified(f"p{n}") for n in range(6)]
    try:
        # Six principals' calls reach both capsules; the slow one hangs on each.
        deliveries = [bus.publish(sender, "work.x", "{}", principal) for principal in principals]
        assert hanging.wait_started(2)
        assert quick.wait_started(6), "the fast capsule waited behind the slow one"
        assert hanging.now == hanging.most == 2  # its four other lanes wait without a worker
    finally:
        release.set()
    assert all(delivery.wait(10) for delivery in deliveries)
    assert hanging.started == 6 and hanging.most == 2
    dispatcher.close()


def test_a_lane_whose_capsule_is_at_its_share_waits_without_holding_a_worker():
    dispatcher, bus, slow, sender = _setup(workers=2)  # a capsule's share: 1 worker
    fast = host_participant("fast", "src-fast", subscribe=["slow.*"])
    release = threading.Event()
    hanging = Running()

    bus.bind(Binding(slow, "work.*", hanging.handler(release), is_capsule=True))
    bus.bind(Binding(fast, "slow.*", lambda message: None, is_capsule=True))
    try:
        alice = bus.publish(sender, "work.x", "{}", ALICE)
        assert hanging.wait_started(1)
        bob = bus.publish(sender, "work.x", "{}", BOB)  # waits: the slow capsule is at its share
        # carol's call of the other capsule takes the second worker, not bob's lane
        carol = bus.publish(host_participant("s", "src-s", publish=["slow.*"]), "slow.x", "{}", CAROL)
        assert carol.wait(5), "a lane at its capsule's share held the last worker"
        assert hanging.started == 1 and not bob.finished
    finally:
        release.set()
    assert alice.wait(5) and bob.wait(5) and hanging.started == 2
    dispatcher.close()


def test_lanes_take_turns_one_call_each():
    dispatcher, bus, capsule, sender = _setup(workers=1)
    release = threading.Event()
    running = Running()
    order: list[str] = []

    def handler(message):
        order.append(f"{message.principal.name}{message.payload}")
        running.enter()
        if running.started == 1:
            release.wait(10)  # hold the only worker while both lanes fill
        running.leave()

    bus.bind(Binding(capsule, "work.*", handler, is_capsule=True))
    try:
        alice = [bus.publish(sender, "work.x", str(n), ALICE) for n in range(3)]
        assert running.wait_started(1)
        bob = [bus.publish(sender, "work.x", str(n), BOB) for n in range(3)]
    finally:
        release.set()
    assert all(delivery.wait(10) for delivery in alice + bob)
    assert order == ["alice0", "bob0", "alice1", "bob1", "alice2", "bob2"]
    dispatcher.close()


def test_close_finishes_every_waiting_call_once_and_runs_none_of_them():
    dispatcher, bus, capsule, _ = _setup(workers=1)
    host = host_participant("host", "src-host", subscribe=["work.*"])
    release = threading.Event()
    running = Running()
    hang = running.handler(release)

    on_capsule = Binding(capsule, "work.*", hang, is_capsule=True)
    first = _dispatch(dispatcher, on_capsule, ALICE)
    assert running.wait_started(1)
    waiting = [_dispatch(dispatcher, on_capsule, principal) for principal in (ALICE, BOB, CAROL)]
    dispatcher_host = PoolDispatcher(capsule_workers=1, host_workers=1)
    on_host = Binding(host, "work.*", hang)
    host_first = _dispatch(dispatcher_host, on_host, ALICE)
    assert running.wait_started(2)
    host_waiting = _dispatch(dispatcher_host, on_host, BOB)
    try:
        dispatcher.close()
        dispatcher_host.close()
        assert all(delivery.finished for delivery in [*waiting, host_waiting])  # by close(), unrun
        after = _dispatch(dispatcher, on_capsule, BOB)
        assert after.finished  # closed: finished at once, unrun
    finally:
        release.set()
    assert first.wait(5) and host_first.wait(5)
    assert running.started == 2
    assert [d.finishes for d in [first, *waiting, host_first, host_waiting, after]] == [1] * 7
