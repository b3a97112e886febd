"""`NatsBus`: this process's in-memory bus, bridged to the other hosts' over NATS."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from astrid.host.bus.base import UNPARSED, IpcErrorCode, Participant, Principal
from astrid.host.bus.memory import Dispatcher, InMemoryBus
from astrid.host.bus.nats.connection import Connection, nats_problem, shown
from astrid.host.bus.nats.envelope import H_HOST, H_MSG, H_RETRY, hop_attributes, remote_message, stamp
from astrid.host.bus.nats.groups import QueueGroups
from astrid.host.bus.nats.membership import Membership
from astrid.host.bus.nats.reports import Reports
from astrid.host.bus.nats.rounds import ClusterDelivery
from astrid.host.bus.nats.tracking import Tracker
from astrid.host.bus.topics import ClusterTopics, pattern_matches
from astrid.host.errors import BusError
from astrid.host.limits import DEFAULT_LIMITS
from astrid.host.telemetry import metrics, tracing
from astrid.host.tuning import NATS_TUNING


class NatsBus(InMemoryBus):
    """This process's bus, bridged to the others over a NATS server."""

    def __init__(
        self,
        url: str,
        *,
        role: str,
        cluster: ClusterTopics,
        shared: Sequence[str] = (),
        listen: Sequence[str] | None = None,
        tracked: Sequence[str] = (),
        credentials: str | None = None,
        dispatcher: Dispatcher | None = None,
        max_payload_bytes: int = DEFAULT_LIMITS.bus_message_bytes,
    ) -> None:
        super().__init__(dispatcher, max_payload_bytes)
        problem = nats_problem(url)
        if problem:
            raise BusError(IpcErrorCode.INVALID_INPUT, problem)
        self.url = url
        self.role = role  # "capsules" (a capsule host) or "mcp" (the broker's process)
        self.cluster = cluster
        self.host_id = uuid.uuid4().hex
        self.shared = tuple(shared)  # the patterns that cross hosts
        # what this host takes in from the others (default: all shared): a role needs only its side
        self.listen = self.shared if listen is None else tuple(listen)
        self.tracked = tuple(tracked)
        self.credentials = credentials
        self.capsule_set: Callable[[], Sequence[str]] = lambda: ()
        # source-id -> the signature record of each signed capsule run here, announced with the set
        self.capsule_claims: Callable[[], Mapping[str, str]] = lambda: {}
        self.on_membership_change: Callable[[], None] = lambda: None
        self._ids = itertools.count(1)
        self._connection = Connection(url, credentials)
        self._members = Membership(self._connection, cluster, self.host_id, role, lambda: self.on_membership_change())
        self._tracker = Tracker(self._connection, self._members)
        self._members.released, self._members.regrouped = self._tracker.release, self._tracker.prune
        # the requests this host hears, in one queue group per capsule (replicas share the load)
        group_patterns = tuple(p for p in self.listen if p in self.tracked)
        self._groups = QueueGroups(self._connection, group_patterns, self._on_nats_message)
        self._reports = Reports(self._connection, cluster, self.host_id)
        self._forget_gauge: Callable[[], None] = lambda: None

    # -- lifecycle ---------------------------------------------------------------------

    def connect(self, timeout_s: float = NATS_TUNING.connect_timeout_s) -> NatsBus:
        """Connect and start the heartbeat; BusError naming the cause when the server cannot be used."""
        try:
            self._connection.open((*self.listen, self.cluster.pattern), self._on_nats_message, timeout_s)
        except BusError:
            self.close()
            raise
        self._connection.submit(
            self._members.beat(lambda: self.capsule_set(), lambda: self.capsule_claims(), self._groups)
        )
        if self.tracked:
            self._connection.submit(self._tracker.watch())
        time.sleep(NATS_TUNING.heartbeat_s * 1.5)  # hear the hosts already there before the first round
        self._forget_gauge = metrics.watch("astrid_nats_hosts", self._members.by_role)
        return self

    def capsule_set_changed(self) -> None:
        """The capsules run here changed (a reload): announce them at once, not at the next heartbeat."""
        self._members.beat_soon()

    def close(self) -> None:
        if self._connection.closed:
            return
        self._forget_gauge()
        self._connection.close(self._goodbye)

    async def _goodbye(self) -> None:
        # out of every queue group first: what the others publish again on our goodbye must reach a replica
        await self._groups.sync(set())
        await self._members.goodbye()

    def call(self, coroutine: Any, timeout_s: float) -> Any:
        """Run a coroutine on the NATS loop and wait for its result (from any other thread)."""
        return self._connection.call(coroutine, timeout_s)

    def jetstream(self) -> Any:
        """The connection's JetStream context (on the NATS loop only)."""
        return self._connection.client.jetstream()

    @property
    def connected(self) -> bool:
        return self._connection.connected

    def claims_of(self, source_id: str) -> tuple[str, ...]:
        """What the other hosts that run `source_id` claim of who it is (unverified: see identity.vetting)."""
        return self._members.claims_of(source_id)

    def hosts(self) -> dict[str, tuple[str, ...]]:
        """The other hosts alive now, with their capsule sets."""
        return self._members.alive()

    # -- publishing: here, then to the other hosts ---------------------------------------

    def publish(  # type: ignore[override]
        self, sender: Participant, topic: str, payload: str, principal: Principal, *, parsed: object = UNPARSED
    ) -> ClusterDelivery:
        if self._is_local_only(topic):
            return ClusterDelivery(super().publish(sender, topic, payload, principal, parsed=parsed), None)
        if not self.connected:  # fail fast: a round that cannot reach the other hosts is not a round
            raise BusError(IpcErrorCode.UNKNOWN, f"the NATS server at {shown(self.url)} is unreachable; retry shortly")
        local = super().publish(sender, topic, payload, principal, parsed=parsed)
        message_id = f"{self.host_id}.{next(self._ids)}"
        tracked = self._tracker.track(message_id) if self._is_tracked(topic) else None
        headers = stamp(local.message, principal, self.host_id, message_id)
        if tracing.on:  # the trace goes with the message: the other host's spans join it
            with tracing.span("nats publish", hop_attributes("send", topic, message_id), kind="producer"):
                tracing.inject(headers)
        if tracked is not None and tracked.groups:
            tracked.resend = (topic, payload, headers)
        self._connection.submit(self._connection.send(topic, payload, headers))
        return ClusterDelivery(local, tracked)

    # -- receiving from the other hosts ----------------------------------------------------

    async def _on_nats_message(self, msg: Any, group: str | None = None) -> None:
        """A message from NATS; `group`: it came through that capsule's queue group.

        Nothing is awaited before a reply reaches this bus: a done report, on another subscription,
        must never be handled before a reply sent ahead of it (docs/nats.md#report-order)."""
        headers = msg.headers or {}
        origin = headers.get(H_HOST)
        if origin == self.host_id:
            return  # our own publish, already delivered here
        topic = msg.subject  # topics are concrete: subject and topic are the same text
        if group is None:
            if topic == self.cluster.heartbeat:
                self._members.on_heartbeat(msg.data)
                return
            if topic.startswith(self.cluster.done_prefix):
                if topic == self.cluster.done_prefix + self.host_id:
                    # After the replies sent before it (docs/nats.md#report-order): nats-py runs each
                    # subscription in a task of its own, and this one, awake already (a claim just
                    # before), would take the report ahead of a reply its task has not run yet. That
                    # task was woken when the reply came in: one turn of the loop puts it first.
                    self._connection.loop.call_soon(self._tracker.on_done, msg.data)
                return
            if topic.startswith(self.cluster.ping_prefix):
                if topic == self.cluster.ping_prefix + self.host_id and origin:
                    await self._members.pong(origin)
                return
        if self._is_local_only(topic) or origin is None:
            return
        retry = headers.get(H_RETRY)
        if retry is not None and retry != group:
            return  # published again for another capsule's group only
        message = remote_message(topic, msg.data, headers, self.max_payload_bytes)
        if message is None:
            return
        self._members.spoke(message.source_id, origin)
        message_id = headers.get(H_MSG) if self._is_tracked(topic) else None
        if group is not None and message_id:
            await self._reports.claim(origin, message_id, group)
        grouped = self._groups.grouped
        # as stamped by its host (its ACL was checked there); a group's message to that capsule alone
        only = (lambda source: source == group) if group is not None else (lambda source: source not in grouped)
        # A span for the hop, a child of the publisher's (its `traceparent` header): the handlers
        # this message runs here (capsule calls) are its children, on whatever thread runs them.
        # None where it reaches nobody (a request this host's replicas take through their group).
        received = tracing.NO_SPAN
        if tracing.on and self._would_reach(topic, only):
            received = tracing.start(
                "nats receive",
                hop_attributes("receive", topic, headers.get(H_MSG)),
                kind="consumer",
                parent=tracing.extract(headers),
            )
        if received:
            with tracing.attached(tracing.context_of(received)):
                delivery = self._deliver(message, only)
        else:
            delivery = self._deliver(message, only)
        if message_id:
            self._reports.when_done(delivery, origin, message_id, group, received)
        else:
            received.end()

    # -- topics ------------------------------------------------------------------------------

    def _is_local_only(self, topic: str) -> bool:
        return not any(pattern_matches(pattern, topic) for pattern in self.shared)

    def _is_tracked(self, topic: str) -> bool:
        return any(pattern_matches(pattern, topic) for pattern in self.tracked)
