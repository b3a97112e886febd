"""What every bus is made of: who speaks, what is said, and the interface.

The layers (kernel, broker, front-door clients) meet only here. `Bus` is the
interface they program against; `memory.InMemoryBus` is the one in this
process (the only one so far); a bus across hosts (NATS) is to implement the
same interface.

- A `Participant` has a source-id and publish/subscribe ACLs (capsules get
  theirs from the manifest, host-native participants from the registry in
  `astrid.host.contract.topics`), and may refuse single messages at delivery
  (`may_receive`).
- A `Message` is host-stamped: every field but `payload` is set by the bus,
  never by the sender, so a capsule cannot forge who it is or whom it acts for.
- Two ways to receive: `subscribe(pattern)` gives a `Subscription` queue to
  `poll`/`recv` from; `bind(Binding)` registers a handler run per message.
- `publish` returns a `Delivery` whose `wait()` returns once every handler
  invoked for that message has finished: the broker ends a drain early with it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal, Protocol

from astrid.host.bus.topics import pattern_matches, topic_problem


class IpcErrorCode(StrEnum):
    """Why a bus operation was refused: the `astrid:ipc` `error-code` cases, as the WIT spells them."""

    CAPABILITY_DENIED = "capability-denied"
    INVALID_INPUT = "invalid-input"
    CLOSED = "closed"
    RATE_LIMITED = "rate-limited"
    BACKPRESSURE = "backpressure"
    QUOTA = "quota"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Principal:
    """Who a message is attributed to: verified(name), claimed(name) or system."""

    kind: Literal["verified", "claimed", "system"]
    name: str | None = None

    @staticmethod
    def verified(name: str) -> Principal:
        return Principal("verified", name)

    @staticmethod
    def claimed(name: str) -> Principal:
        return Principal("claimed", name)

    @staticmethod
    def system() -> Principal:
        return SYSTEM

    @property
    def is_verified(self) -> bool:
        """A verified principal with a name: the only kind resources are served to."""
        return self.kind == "verified" and bool(self.name)

    def __str__(self) -> str:
        return f"{self.kind}({self.name})" if self.name is not None else self.kind


SYSTEM = Principal("system")


UNPARSED: object = object()  # a Message whose payload nobody parsed yet


@dataclass(frozen=True)
class Message:
    """One message as delivered: every field but `payload` is host-stamped.

    `parsed()` is the payload as JSON. A bus that checks a payload is JSON at
    publish keeps what it parsed, so a receiver that needs the value (the
    broker, checking a capsule's reply) does not parse the text again. The
    value is shared by every receiver: read it, never change it."""

    topic: str
    payload: str
    source_id: str
    principal: Principal
    timestamp: str
    seq: int
    data: object = field(default=UNPARSED, compare=False, repr=False)

    def parsed(self) -> object:
        """The payload as a JSON value (raises ValueError when it is not JSON)."""
        if self.data is not UNPARSED:
            return self.data
        return json.loads(self.payload)


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

    def may_receive(self, message: Message) -> bool:
        """May a message its subscriptions or handlers match be given to it? The bus asks
        at delivery, so a right that can change while a subscription lives (a capsule's
        operator grants: `kernel.reserved`) holds for every message. Yes, by default."""
        return True


def _acl_covers(acl: str, pattern: str) -> bool:
    """Does ACL pattern `acl` allow subscribing to `pattern` (itself maybe wild)?"""
    if acl == pattern:
        return True
    if pattern.endswith(".*"):
        # a wildcard subscription needs a wildcard ACL at or above it
        return acl.endswith(".*") and pattern.startswith(acl[:-1])
    return pattern_matches(acl, pattern)


def host_participant(
    name: str, source_id: str, publish: Iterable[str] = (), subscribe: Iterable[str] = ()
) -> Participant:
    """A host-native participant (broker, front-door client, kernel) with its own ACLs."""
    publish, subscribe = tuple(publish), tuple(subscribe)
    for pattern in (*publish, *subscribe):
        problem = topic_problem(pattern, pattern=True)
        if problem:
            raise ValueError(f"{name}: bad ACL pattern {pattern!r}: {problem}")
    return Participant(source_id=source_id, name=name, publish_acl=publish, subscribe_acl=subscribe)


Handler = Callable[[Message], None]


@dataclass
class Binding:
    """A handler bound to a topic pattern; the bus runs it per matching message."""

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


class Subscription(Protocol):
    """A bounded queue of the messages matching one pattern; close it when done."""

    owner: Participant
    pattern: str
    principal_scope: Principal | None
    closed: bool

    def poll(self, limit: int = 256) -> list[Message]:
        """Whatever is queued, up to `limit`, without waiting."""
        ...

    def recv(self, timeout_s: float) -> Message | None:
        """One message, waiting up to `timeout_s`; None on timeout or close."""
        ...

    def take_counters(self) -> tuple[int, int]:
        """(dropped, lagged) since the last call, then reset."""
        ...

    def notify(self, wake: Callable[[], None] | None) -> None:
        """Call `wake` after each message queued from now on, on the thread that queued it (so it
        must be quick and never raise): a caller that waits without a thread learns of it."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> Subscription: ...

    def __exit__(self, *exc: object) -> None: ...


class Delivery(Protocol):
    """What became of one published message."""

    message: Message
    receivers: int

    @property
    def reached(self) -> frozenset[str]:
        """The source-ids of the participants whose handlers it was given to."""
        ...

    @property
    def finished(self) -> bool:
        """Has every handler invoked for the message finished?"""
        ...

    def wait(self, timeout_s: float) -> bool:
        """True once every handler invoked for the message has finished."""
        ...

    def when_finished(self, callback: Callable[[], None]) -> None:
        """Call `callback` once `finished` is true: now when it is, else on the thread that makes it
        so (so it must be quick and never raise); at most once."""
        ...


class Bus(Protocol):
    """The interface every layer programs against.

    Every operation checks the participant's ACL and the topic grammar and
    raises `BusError` (with an `IpcErrorCode`) when it refuses.
    """

    max_payload_bytes: int

    def publish(
        self, sender: Participant, topic: str, payload: str, principal: Principal, *, parsed: object = UNPARSED
    ) -> Delivery:
        """Stamp and deliver a message attributed to `principal`.

        `parsed`: the payload's JSON value, from host code publishing a payload it
        checked already (a static reply, checked at load); the bus then skips its
        own parse. Every other check is made as for any publish."""
        ...

    def subscribe(self, owner: Participant, pattern: str, principal_scope: Principal | None = None) -> Subscription:
        """A queue of the messages on `pattern` (only `principal_scope`'s, when given)."""
        ...

    def bind(self, binding: Binding) -> Binding:
        """Run `binding.handler` for every matching message."""
        ...

    def bind_all(self, bindings: Iterable[Binding], *, replacing: str | None = None) -> None:
        """Add `bindings` in one step, replacing participant `replacing`'s bindings and subscriptions."""
        ...

    def unbind_owner(self, source_id: str) -> None:
        """Remove every binding and subscription of a participant."""
        ...
