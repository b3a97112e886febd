"""The in-memory bus: every participant in one process.

It implements `astrid.host.bus.base.Bus`: ACL and grammar checks on every
operation (and the receiver's `may_receive` on every delivery), host-stamped
messages, bounded subscription queues (the oldest message is dropped and
counted when one is full) and bound handlers run by a `Dispatcher` (inline by
default; the kernel installs a thread pool).
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NoReturn

from astrid.host.bus.base import UNPARSED, Binding, IpcErrorCode, Message, Participant, Principal
from astrid.host.bus.topics import WILDCARD, pattern_matches, topic_problem
from astrid.host.errors import BusError
from astrid.host.limits import DEFAULT_LIMITS
from astrid.host.tuning import BUS_TUNING

log = logging.getLogger(__name__)


class InMemorySubscription:
    """A bounded queue of the messages matching one pattern.

    `principal_scope` (when set) admits only messages of that principal: a
    subscription made while handling alice's message never sees bob's.
    """

    def __init__(self, bus: InMemoryBus, owner: Participant, pattern: str, principal_scope: Principal | None) -> None:
        self.bus = bus
        self.owner = owner
        self.pattern = pattern
        self.principal_scope = principal_scope
        self._queue: deque[Message] = deque()
        self._cond = threading.Condition()
        self.dropped = 0
        self.lagged = 0
        self.closed = False
        self._wake: Callable[[], None] | None = None

    def notify(self, wake: Callable[[], None] | None) -> None:
        self._wake = wake

    def _offer(self, message: Message) -> None:
        if self.principal_scope is not None and message.principal != self.principal_scope:
            return
        if not self.owner.may_receive(message):
            return
        with self._cond:
            if self.closed:
                return
            if len(self._queue) >= BUS_TUNING.subscription_queue_messages:
                self._queue.popleft()
                self.dropped += 1
                self.lagged += 1
            self._queue.append(message)
            self._cond.notify_all()
            wake = self._wake
        if wake is not None:
            wake()

    def poll(self, limit: int = 256) -> list[Message]:
        """Whatever is queued, up to `limit`, without waiting."""
        with self._cond:
            count = min(limit, len(self._queue))
            return [self._queue.popleft() for _ in range(count)]

    def recv(self, timeout_s: float) -> Message | None:
        """One message, waiting up to `timeout_s`; None on timeout or close."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait_for(lambda: self._queue or self.closed, timeout=max(0.0, timeout_s))
            return self._queue.popleft() if self._queue else None

    def take_counters(self) -> tuple[int, int]:
        with self._cond:
            counters = (self.dropped, self.lagged)
            self.dropped = self.lagged = 0
            return counters

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._queue.clear()
            self._wake = None
            self._cond.notify_all()
        self.bus._remove_subscription(self)

    def __enter__(self) -> InMemorySubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SubscriptionIndex:
    """The live subscriptions, found by topic without matching every pattern: an exact pattern
    (a read's reply topic, one per read in flight) by its text, the few ending in `*` by a scan.
    Not thread-safe: the bus's lock guards it."""

    def __init__(self) -> None:
        self._exact: dict[str, list[InMemorySubscription]] = {}
        self._wild: list[InMemorySubscription] = []
        self._per_source: dict[str, int] = {}

    def add(self, subscription: InMemorySubscription) -> None:
        if subscription.pattern.endswith(_WILD_SUFFIX):
            self._wild.append(subscription)
        else:
            self._exact.setdefault(subscription.pattern, []).append(subscription)
        source = subscription.owner.source_id
        self._per_source[source] = self._per_source.get(source, 0) + 1

    def remove(self, subscription: InMemorySubscription) -> None:
        """Take it out (a second removal, after a replacement took it out already, does nothing)."""
        pattern = subscription.pattern
        found = self._wild if pattern.endswith(_WILD_SUFFIX) else self._exact.get(pattern)
        if found is None or subscription not in found:
            return
        found.remove(subscription)
        if not found and found is not self._wild:
            del self._exact[pattern]
        source = subscription.owner.source_id
        left = self._per_source[source] - 1
        if left:
            self._per_source[source] = left
        else:
            del self._per_source[source]

    def matching(self, topic: str) -> list[InMemorySubscription]:
        exact = self._exact.get(topic)
        matched = list(exact) if exact else []
        matched += [s for s in self._wild if pattern_matches(s.pattern, topic)]
        return matched

    def count_of(self, source_id: str) -> int:
        return self._per_source.get(source_id, 0)

    def all(self) -> list[InMemorySubscription]:
        return [s for found in self._exact.values() for s in found] + self._wild

    def of(self, source_id: str) -> list[InMemorySubscription]:
        """Every live subscription of one participant (an unload or a rebuild closes them)."""
        return [s for s in self.all() if s.owner.source_id == source_id]


_WILD_SUFFIX = "." + WILDCARD
_NOTHING_TO_RUN = threading.Condition()


class InMemoryDelivery:
    """Tracks the handler invocations of one published message."""

    def __init__(self, message: Message, runs: list[tuple[Binding, Message]]) -> None:
        self.message = message
        self.receivers = len(runs)
        self._runs = runs
        self._pending = len(runs)
        # A message no handler runs for (a reply) is finished from the start: it shares one condition.
        self._cond = threading.Condition() if runs else _NOTHING_TO_RUN
        self._when_finished: list[Callable[[], None]] = []

    @property
    def reached(self) -> frozenset[str]:
        """The source-ids of the participants whose handlers it was given to."""
        return frozenset(binding.owner.source_id for binding, _ in self._runs)

    def handler_finished(self) -> None:
        """A dispatcher calls this once per handler run, when the handler returns."""
        with self._cond:
            self._pending -= 1
            if self._pending > 0:
                return
            self._cond.notify_all()
            callbacks, self._when_finished = self._when_finished, []
        for callback in callbacks:
            callback()

    def when_finished(self, callback: Callable[[], None]) -> None:
        """Call `callback` once every handler invoked for the message has finished: now when they
        have, else on the thread that finishes the last one (so it must be quick, and never raise)."""
        with self._cond:
            if self._pending > 0:
                self._when_finished.append(callback)
                return
        callback()

    @property
    def finished(self) -> bool:
        with self._cond:
            return self._pending <= 0

    def wait(self, timeout_s: float) -> bool:
        """True once every handler invoked for the message has finished."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending <= 0, timeout=max(0.0, timeout_s))


class Dispatcher:
    """Runs bound handlers; the default runs them inline (tests, tools).

    The kernel installs a thread-pool dispatcher so handlers run in parallel.
    """

    def dispatch(self, runs: list[tuple[Binding, Message]], delivery: InMemoryDelivery) -> None:
        for binding, message in runs:
            try:
                binding.handler(message)
            except Exception:  # a handler must never break the publisher
                log.exception("handler %s for %s failed", binding.owner.name, message.topic)
            finally:
                delivery.handler_finished()


_last_stamp: tuple[int, str] = (-1, "")  # (millisecond, its text): most messages share their millisecond


def now_iso() -> str:
    """The time now, as a message's timestamp (UTC, milliseconds)."""
    global _last_stamp
    ms = time.time_ns() // 1_000_000
    last = _last_stamp
    if last[0] == ms:
        return last[1]
    moment = datetime.fromtimestamp(ms // 1000, UTC).replace(microsecond=ms % 1000 * 1000)
    text = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    _last_stamp = (ms, text)
    return text


@dataclass
class BusStats:
    published: int = 0
    refused: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


class InMemoryBus:
    """The bus of one process: every participant in it, handlers on its dispatcher."""

    def __init__(
        self, dispatcher: Dispatcher | None = None, max_payload_bytes: int = DEFAULT_LIMITS.bus_message_bytes
    ) -> None:
        self.dispatcher = dispatcher or Dispatcher()
        self.max_payload_bytes = max_payload_bytes
        self._lock = threading.Lock()
        self._live = _SubscriptionIndex()
        self._bindings: list[Binding] = []
        # The bindings each topic reaches, in binding order: a publish looks them up instead of
        # matching every pattern (bindings change only at load). Emptied on every change, and when
        # full (capsules may publish on topics of their own).
        self._bindings_for: dict[str, list[Binding]] = {}
        self._seq = itertools.count(1)
        self.stats = BusStats()

    # -- publishing ---------------------------------------------------------

    def publish(
        self, sender: Participant, topic: str, payload: str, principal: Principal, *, parsed: object = UNPARSED
    ) -> InMemoryDelivery:
        """Stamp and deliver a message; raises BusError when refused (`parsed`: `Bus.publish`)."""
        data = self._check_publish(sender, topic, payload, parsed)
        message = Message(topic, payload, sender.source_id, principal, now_iso(), next(self._seq), data)
        return self._deliver(message)

    def _deliver(self, message: Message, only: Callable[[str], bool] | None = None) -> InMemoryDelivery:
        """Hand a stamped message (published here, or on another host's bus) to the
        matching subscriptions and handlers; `only(source_id)` False leaves that
        participant out (a NATS queue group delivers a request to one replica)."""
        with self._lock:
            self.stats.published += 1  # every message this bus delivered
            subscriptions = self._live.matching(message.topic)
            bindings = self._bindings_reaching(message.topic)
        if only is not None:
            subscriptions = [s for s in subscriptions if only(s.owner.source_id)]
            bindings = [b for b in bindings if only(b.owner.source_id)]
        # Outside the lock: `may_receive` may read a capsule's grants file.
        runs = [
            (b, message) for b in bindings if (b.accepts is None or b.accepts(message)) and b.owner.may_receive(message)
        ]
        for subscription in subscriptions:
            subscription._offer(message)
        delivery = InMemoryDelivery(message, runs)
        if runs:
            self.dispatcher.dispatch(runs, delivery)
        return delivery

    def _bindings_reaching(self, topic: str) -> list[Binding]:
        """The bindings whose pattern matches `topic` (call with the lock held; never change the list)."""
        bindings = self._bindings_for.get(topic)
        if bindings is None:
            if len(self._bindings_for) >= BUS_TUNING.topics_remembered:
                self._bindings_for.clear()
            bindings = self._bindings_for[topic] = [b for b in self._bindings if pattern_matches(b.pattern, topic)]
        return bindings

    def _would_reach(self, topic: str, only: Callable[[str], bool] | None = None) -> bool:
        """Would `_deliver` hand a message on `topic` to anyone here (before the per-message checks)?"""
        with self._lock:
            owners = [s.owner for s in self._live.matching(topic)]
            owners += [b.owner for b in self._bindings_reaching(topic)]
        return any(only is None or only(owner.source_id) for owner in owners)

    def _check_publish(self, sender: Participant, topic: str, payload: str, parsed: object = UNPARSED) -> object:
        """Refuse what the contract forbids; the payload's JSON value when it passes."""
        problem = topic_problem(topic)
        if problem:
            self._refuse(IpcErrorCode.INVALID_INPUT, f"invalid topic {topic!r}: {problem}")
        if not sender.may_publish(topic):
            self._refuse(IpcErrorCode.CAPABILITY_DENIED, f"{sender.name} may not publish on {topic}")
        if not isinstance(payload, str):
            self._refuse(IpcErrorCode.INVALID_INPUT, "payload must be JSON text")
        try:
            size = len(payload.encode("utf-8"))
        except UnicodeEncodeError:
            self._refuse(IpcErrorCode.INVALID_INPUT, "payload is not valid UTF-8")
        if size > self.max_payload_bytes:
            self._refuse(
                IpcErrorCode.INVALID_INPUT, f"payload of {size} bytes exceeds the {self.max_payload_bytes}-byte cap"
            )
        if parsed is not UNPARSED:
            return parsed
        try:
            return json.loads(payload)
        except (ValueError, RecursionError):
            self._refuse(IpcErrorCode.INVALID_INPUT, "payload is not JSON")

    def _refuse(self, code: IpcErrorCode, message: str) -> NoReturn:
        with self._lock:
            self.stats.refused += 1
            self.stats.by_code[code] = self.stats.by_code.get(code, 0) + 1
        raise BusError(code, message)

    # -- receiving ----------------------------------------------------------

    def subscribe(
        self, owner: Participant, pattern: str, principal_scope: Principal | None = None
    ) -> InMemorySubscription:
        problem = topic_problem(pattern, pattern=True)
        if problem:
            raise BusError(IpcErrorCode.INVALID_INPUT, f"invalid subscription pattern {pattern!r}: {problem}")
        if not owner.may_subscribe(pattern):
            raise BusError(IpcErrorCode.CAPABILITY_DENIED, f"{owner.name} may not subscribe to {pattern}")
        subscription = InMemorySubscription(self, owner, pattern, principal_scope)
        with self._lock:
            if self._live.count_of(owner.source_id) >= BUS_TUNING.subscriptions_per_source:
                raise BusError(IpcErrorCode.QUOTA, "too many subscriptions")
            self._live.add(subscription)
        return subscription

    @property
    def _subscriptions(self) -> list[InMemorySubscription]:
        """Every live subscription, as a list (what diagnostics and tests look at)."""
        with self._lock:
            return self._live.all()

    def _remove_subscription(self, subscription: InMemorySubscription) -> None:
        with self._lock:
            self._live.remove(subscription)

    def bind(self, binding: Binding) -> Binding:
        self.bind_all([binding])
        return binding

    def bind_all(self, bindings: Iterable[Binding], *, replacing: str | None = None) -> None:
        """Add `bindings` in one step. With `replacing`, that participant's
        bindings and subscriptions go in the same step: every publish reaches
        the old set or the new one, never neither (a capsule rebuilt under load)."""
        bindings = list(bindings)
        for binding in bindings:
            problem = topic_problem(binding.pattern, pattern=True)
            if problem:
                raise BusError(IpcErrorCode.INVALID_INPUT, f"invalid handler pattern {binding.pattern!r}: {problem}")
        with self._lock:
            kept = (
                self._bindings if replacing is None else [b for b in self._bindings if b.owner.source_id != replacing]
            )
            self._bindings = kept + bindings
            self._bindings_for = {}
            doomed = [] if replacing is None else self._live.of(replacing)
        for subscription in doomed:
            subscription.close()

    def unbind_owner(self, source_id: str) -> None:
        """Remove every binding and subscription of a participant (unload)."""
        self.bind_all([], replacing=source_id)

    def close(self) -> None:
        """Nothing to release in one process (a bus across hosts closes its connection)."""
