"""The in-memory bus: topics, ACLs, host-stamped envelopes, bounded queues.

Everything that talks on the bus is a `Participant` with a source-id and
publish/subscribe ACLs (capsules get theirs from the manifest; host-native
participants such as the broker and the MCP server declare their own).
The interface is small on purpose (publish, subscribe, bind) so a NATS-backed
bus can replace this one later.

Two ways to receive:
- `subscribe(pattern)` gives a `Subscription` queue to `poll`/`recv` from;
- `bind(pattern, handler)` registers a handler the dispatcher invokes for each
  matching message (capsule interceptors and host handlers alike).

`publish` returns a `Delivery` whose `wait()` returns once every handler
invoked for that message has finished: the broker ends a drain early with it.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from astrid.host.limits import DEFAULT_LIMITS
from astrid.host.topics import pattern_matches, topic_problem

log = logging.getLogger(__name__)

QUEUE_CAPACITY = 1024
# A backstop across all of a participant's instances (one per principal); the
# host ABI caps each capsule instance at 128 live subscriptions.
MAX_SUBSCRIPTIONS_PER_SOURCE = 8192


class BusError(Exception):
    """A refused bus operation; `code` is an `astrid:ipc` error-code case name."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Principal:
    """Who a message is attributed to: verified(name), claimed(name) or system."""

    kind: Literal["verified", "claimed", "system"]
    name: str | None = None

    @staticmethod
    def verified(name: str) -> "Principal":
        return Principal("verified", name)

    @staticmethod
    def claimed(name: str) -> "Principal":
        return Principal("claimed", name)

    @staticmethod
    def system() -> "Principal":
        return SYSTEM

    def __str__(self) -> str:
        return f"{self.kind}({self.name})" if self.name is not None else self.kind


SYSTEM = Principal("system")


@dataclass(frozen=True)
class Message:
    """One message as delivered: every field but `payload` is host-stamped."""

    topic: str
    payload: str
    source_id: str
    principal: Principal
    timestamp: str
    seq: int


@dataclass(frozen=True)
class Participant:
    """Anything that publishes or subscribes: a capsule or a host component."""

    source_id: str
    name: str
    publish_acl: tuple[str, ...] = ()
    subscribe_acl: tuple[str, ...] = ()

    def may_publish(self, topic: str) -> bool:
        return any(pattern_matches(p, topic) for p in self.publish_acl)

    def may_subscribe(self, pattern: str) -> bool:
        return any(_acl_covers(acl, pattern) for acl in self.subscribe_acl)


def _acl_covers(acl: str, pattern: str) -> bool:
    """Does ACL pattern `acl` allow subscribing to `pattern` (itself maybe wild)?"""
    if acl == pattern:
        return True
    if pattern.endswith(".*"):
        # a wildcard subscription needs a wildcard ACL at or above it
        return acl.endswith(".*") and pattern.startswith(acl[:-1])
    return pattern_matches(acl, pattern)


class Subscription:
    """A bounded queue of the messages matching one pattern.

    `principal_scope` (when set) admits only messages of that principal: a
    subscription made while handling alice's message never sees bob's.
    """

    def __init__(self, bus: "Bus", owner: Participant, pattern: str, principal_scope: Principal | None) -> None:
        self.bus = bus
        self.owner = owner
        self.pattern = pattern
        self.principal_scope = principal_scope
        self._queue: deque[Message] = deque()
        self._cond = threading.Condition()
        self.dropped = 0
        self.lagged = 0
        self.closed = False

    def _offer(self, message: Message) -> None:
        if self.principal_scope is not None and message.principal != self.principal_scope:
            return
        with self._cond:
            if self.closed:
                return
            if len(self._queue) >= QUEUE_CAPACITY:
                self._queue.popleft()
                self.dropped += 1
                self.lagged += 1
            self._queue.append(message)
            self._cond.notify_all()

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
            self._cond.notify_all()
        self.bus._remove_subscription(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


Handler = Callable[[Message], None]


@dataclass
class Binding:
    """A handler bound to a topic pattern; the dispatcher runs it per message."""

    owner: Participant
    pattern: str
    handler: Handler
    # A filter on the messages that reach the handler (None = all).
    accepts: Callable[[Message], bool] | None = None
    # Capsule calls run on their own worker pool (see kernel.dispatch).
    is_capsule: bool = False
    # Run in the publisher's thread: for quick, non-blocking host services
    # (a pool thread could be held by a broker waiting on this very answer).
    inline: bool = False


class Delivery:
    """Tracks the handler invocations of one published message."""

    def __init__(self, message: Message, runs: list[tuple[Binding, Message]]) -> None:
        self.message = message
        self.receivers = len(runs)
        self._runs = runs
        self._pending = len(runs)
        self._cond = threading.Condition()

    @property
    def reached(self) -> frozenset[str]:
        """The source-ids of the participants whose handlers it was given to."""
        return frozenset(binding.owner.source_id for binding, _ in self._runs)

    def _done_one(self) -> None:
        with self._cond:
            self._pending -= 1
            if self._pending <= 0:
                self._cond.notify_all()

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

    def dispatch(self, runs: list[tuple[Binding, Message]], delivery: Delivery) -> None:
        for binding, message in runs:
            try:
                binding.handler(message)
            except Exception:  # a handler must never break the publisher
                log.exception("handler %s for %s failed", binding.owner.name, message.topic)
            finally:
                delivery._done_one()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class BusStats:
    published: int = 0
    refused: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


class Bus:
    def __init__(self, dispatcher: Dispatcher | None = None, max_payload_bytes: int = DEFAULT_LIMITS.bus_message_bytes) -> None:
        self.dispatcher = dispatcher or Dispatcher()
        self.max_payload_bytes = max_payload_bytes
        self._lock = threading.Lock()
        self._subscriptions: list[Subscription] = []
        self._bindings: list[Binding] = []
        self._seq = itertools.count(1)
        self.stats = BusStats()

    # -- publishing ---------------------------------------------------------

    def publish(self, sender: Participant, topic: str, payload: str, principal: Principal) -> Delivery:
        """Stamp and deliver a message; raises BusError when refused."""
        self._check_publish(sender, topic, payload)
        message = Message(topic, payload, sender.source_id, principal, now_iso(), next(self._seq))
        with self._lock:
            subscriptions = [s for s in self._subscriptions if pattern_matches(s.pattern, topic)]
            runs = [
                (b, message)
                for b in self._bindings
                if pattern_matches(b.pattern, topic) and (b.accepts is None or b.accepts(message))
            ]
            self.stats.published += 1
        for subscription in subscriptions:
            subscription._offer(message)
        delivery = Delivery(message, runs)
        if runs:
            self.dispatcher.dispatch(runs, delivery)
        return delivery

    def _check_publish(self, sender: Participant, topic: str, payload: str) -> None:
        problem = topic_problem(topic)
        if problem:
            self._refuse("invalid-input", f"invalid topic {topic!r}: {problem}")
        if not sender.may_publish(topic):
            self._refuse("capability-denied", f"{sender.name} may not publish on {topic}")
        if not isinstance(payload, str):
            self._refuse("invalid-input", "payload must be JSON text")
        try:
            size = len(payload.encode("utf-8"))
        except UnicodeEncodeError:
            self._refuse("invalid-input", "payload is not valid UTF-8")
        if size > self.max_payload_bytes:
            self._refuse("invalid-input", f"payload of {size} bytes exceeds the {self.max_payload_bytes}-byte cap")
        try:
            json.loads(payload)
        except (ValueError, RecursionError):
            self._refuse("invalid-input", "payload is not JSON")

    def _refuse(self, code: str, message: str) -> None:
        with self._lock:
            self.stats.refused += 1
            self.stats.by_code[code] = self.stats.by_code.get(code, 0) + 1
        raise BusError(code, message)

    # -- receiving ----------------------------------------------------------

    def subscribe(self, owner: Participant, pattern: str, principal_scope: Principal | None = None) -> Subscription:
        problem = topic_problem(pattern, pattern=True)
        if problem:
            raise BusError("invalid-input", f"invalid subscription pattern {pattern!r}: {problem}")
        if not owner.may_subscribe(pattern):
            raise BusError("capability-denied", f"{owner.name} may not subscribe to {pattern}")
        subscription = Subscription(self, owner, pattern, principal_scope)
        with self._lock:
            live = sum(1 for s in self._subscriptions if s.owner.source_id == owner.source_id)
            if live >= MAX_SUBSCRIPTIONS_PER_SOURCE:
                raise BusError("quota", "too many subscriptions")
            self._subscriptions.append(subscription)
        return subscription

    def _remove_subscription(self, subscription: Subscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

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
                raise BusError("invalid-input", f"invalid handler pattern {binding.pattern!r}: {problem}")
        with self._lock:
            kept = self._bindings if replacing is None else [b for b in self._bindings if b.owner.source_id != replacing]
            self._bindings = kept + bindings
            doomed = [] if replacing is None else [s for s in self._subscriptions if s.owner.source_id == replacing]
        for subscription in doomed:
            subscription.close()

    def unbind_owner(self, source_id: str) -> None:
        """Remove every binding and subscription of a participant (unload)."""
        self.bind_all([], replacing=source_id)


def host_participant(name: str, source_id: str, publish: Iterable[str] = (), subscribe: Iterable[str] = ()) -> Participant:
    """A host-native participant (broker, MCP server) with its own ACLs."""
    for pattern in (*publish, *subscribe):
        problem = topic_problem(pattern, pattern=True)
        if problem:
            raise ValueError(f"{name}: bad ACL pattern {pattern!r}: {problem}")
    return Participant(source_id=source_id, name=name, publish_acl=tuple(publish), subscribe_acl=tuple(subscribe))


__all__ = [
    "Binding",
    "Bus",
    "BusError",
    "Delivery",
    "Dispatcher",
    "Message",
    "Participant",
    "Principal",
    "SYSTEM",
    "Subscription",
    "host_participant",
]
