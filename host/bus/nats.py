"""The bus across processes and machines: the in-memory bus, bridged over NATS.

Each process keeps its own `InMemoryBus` (ACLs, queues, handlers, deliveries
exactly as on one machine) and bridges it to NATS:

- a local publish is delivered locally, then sent to NATS on the subject
  of the same name, with the envelope in NATS headers (source-id,
  principal kind and name, timestamp, host id, message id). The envelope is
  stamped by the host that runs the publisher, never taken from a payload;
- a message from another host is delivered to this host's subscriptions and
  handlers as that host stamped it (its own ACL was checked where it was
  published; NATS subject permissions bound what each host may publish);
- only topics in `shared` cross (the resource requests and replies); all
  others never leave the process nor enter it from NATS (the front doors
  between the MCP server and its broker, the capsule-set event and the
  inventory each host answers for itself).

Early end across hosts: for a message on a `tracked` topic (the resource
requests), every host that received it reports on the done topic of the asking host
which of its participants it reached, once they have all finished. The
publisher's delivery is finished when its local handlers are and every
capsule host it currently knows has reported; a host that dies mid-round
costs at most the waiter's window. Hosts announce themselves every
`HEARTBEAT_S` on the heartbeat topic (with their capsule set); one
silent for `HOST_TIMEOUT_S` is gone. A host appearing, leaving or changing
its capsule set calls `on_membership_change` (the composition root
re-announces capsule sets, so clients get list_changed).

nats-py is asyncio-only: one event-loop thread owns the connection; the
rest of the host calls in with `run_coroutine_threadsafe`, and nothing slow
ever runs on that loop (handlers go to the bus's dispatcher).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from astrid.host.bus.base import IpcErrorCode, Message, Participant, Principal
from astrid.host.bus.memory import Dispatcher, InMemoryBus, InMemoryDelivery
from astrid.host.bus.topics import pattern_matches, topic_problem
from astrid.host.errors import BusError
from astrid.host.limits import DEFAULT_LIMITS
from astrid.host.telemetry import metrics, tracing

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
HOST_TIMEOUT_S = 3.5
CONNECT_TIMEOUT_S = 5.0
REPORT_WAIT_S = 10.0  # how long a host waits for its own handlers before reporting anyway

# The envelope, in NATS headers.
H_SOURCE, H_KIND, H_NAME, H_TIME, H_HOST, H_MSG = (
    "astrid-source",
    "astrid-principal-kind",
    "astrid-principal",
    "astrid-timestamp",
    "astrid-host",
    "astrid-message",
)


def subject_for(pattern: str) -> str:
    """The NATS subject of a bus topic or pattern: a trailing `*` (one or more segments) is `>`."""
    return pattern[:-1] + ">" if pattern.endswith("*") else pattern


def host_permissions(publish: Sequence[str], cluster: ClusterTopics, listen: Sequence[str]) -> dict[str, Any]:
    """The NATS permissions of a capsule host: it may publish what its capsules' manifests allow
    on the shared topics, plus the bus's own host topics, and hear the requests (`listen`)."""
    return {
        "publish": sorted({subject_for(pattern) for pattern in publish} | {subject_for(cluster.pattern)}),
        "subscribe": sorted({subject_for(p) for p in listen} | {subject_for(cluster.pattern), "_INBOX.>"}),
    }


def nats_problem(url: str) -> str | None:
    """What is wrong with a `--bus` URL (a phrase naming the fix), or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc}); write nats://HOST:PORT"
    if parts.scheme not in ("nats", "tls") or not parts.hostname:
        return f"{url!r}: write nats://[USER:PASSWORD@]HOST:PORT (or tls://...)"
    return None


@dataclass(frozen=True)
class ClusterTopics:
    """The bus's own topics between hosts (named in the topic registry, `contract/topics.py`)."""

    pattern: str  # all of them: what every host listens to
    heartbeat: str
    done_prefix: str  # + the asking host's id


@dataclass
class _Host:
    role: str
    capsules: tuple[str, ...]
    seen: float


@dataclass
class _Tracked:
    """The remote side of one published message: which hosts still owe a report."""

    waiting: set[str]
    expected: frozenset[str] = frozenset()  # the source-ids the live hosts said they run
    reached: set[str] = field(default_factory=set)  # what the reports said
    done: threading.Event = field(default_factory=threading.Event)
    ended: str | None = None  # how the round ended, once (for `--metrics`)

    def end(self, how: str) -> None:
        """Count how the round ended: the first ending counts (reported, host_gone, window, no_hosts)."""
        if self.ended is None:
            self.ended = how
            metrics.nats_round(how)


class ClusterDelivery:
    """A message's deliveries here and on the other hosts it reached."""

    def __init__(self, local: InMemoryDelivery, tracked: _Tracked | None) -> None:
        self.local = local
        self.message = local.message
        self._tracked = tracked

    @property
    def reached(self) -> frozenset[str]:
        """Here: the handlers it was given to. Elsewhere, known at once: the capsules the
        live hosts run (their heartbeats say which), and whatever their reports add."""
        if self._tracked is None:
            return self.local.reached
        return self.local.reached | self._tracked.expected | frozenset(self._tracked.reached)

    @property
    def receivers(self) -> int:
        return self.local.receivers + len(self.reached - self.local.reached)

    @property
    def finished(self) -> bool:
        return self.local.finished and (self._tracked is None or self._tracked.done.is_set())

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout_s)
        if not self.local.wait(timeout_s):
            return False
        if self._tracked is None:
            return True
        done = self._tracked.done.wait(max(0.0, deadline - time.monotonic()))
        if not done:
            self._tracked.end("window")
        return done


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
        self.on_membership_change: Callable[[], None] = lambda: None
        self._ids = itertools.count(1)
        self._hosts: dict[str, _Host] = {}
        self._sources: dict[str, str] = {}  # a remote participant's source-id -> the host it speaks from
        self._pending: dict[str, _Tracked] = {}
        self._state_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="astrid-nats", daemon=True)
        self._connection: Any = None
        self._closed = False
        self._forget_gauge: Callable[[], None] = lambda: None

    # -- lifecycle ---------------------------------------------------------------------

    def connect(self, timeout_s: float = CONNECT_TIMEOUT_S) -> NatsBus:
        """Connect and start the heartbeat; BusError naming the cause when the server cannot be used."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._connect(), self._loop)
        try:
            future.result(timeout_s + 1)
        except Exception as exc:
            self.close()
            raise BusError(
                IpcErrorCode.UNKNOWN,
                f"cannot connect to the NATS server at {_shown(self.url)}: {_reason(exc)}; "
                "check that it runs and that the credentials are right",
            ) from None
        time.sleep(HEARTBEAT_S * 1.5)  # hear the hosts already there before the first round
        self._forget_gauge = metrics.watch("astrid_nats_hosts", self._hosts_by_role)
        return self

    def _hosts_by_role(self) -> list[tuple[tuple[str, ...], float]]:
        """The other hosts alive now, counted by role (the `astrid_nats_hosts` gauge)."""
        counts: dict[str, int] = {}
        for seen in self._live_snapshot():
            counts[seen.role] = counts.get(seen.role, 0) + 1
        return [((role,), float(count)) for role, count in sorted(counts.items())]

    def _live_snapshot(self) -> list[_Host]:
        with self._state_lock:
            return list(self._live_hosts().values())

    async def _connect(self) -> None:
        import nats

        options: dict[str, Any] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "allow_reconnect": True,
            "error_cb": self._on_error,
            "disconnected_cb": self._on_disconnected,
            "reconnected_cb": self._on_reconnected,
        }
        if self.credentials:
            options["user_credentials"] = self.credentials
        self._connection = await nats.connect(self.url, **options)
        for pattern in self.listen:
            await self._connection.subscribe(subject_for(pattern), cb=self._on_nats_message)
        await self._connection.subscribe(subject_for(self.cluster.pattern), cb=self._on_nats_message)
        await self._connection.flush()
        self._loop.create_task(self._heartbeat())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._forget_gauge()
        if not self._loop.is_running():
            return
        if self._connection is not None:
            try:  # say goodbye (the others drop us at once) and drain what is queued
                asyncio.run_coroutine_threadsafe(self._goodbye(), self._loop).result(3)
            except Exception:
                pass
        try:
            asyncio.run_coroutine_threadsafe(self._cancel_tasks(), self._loop).result(3)
        except Exception:
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(3)
        if not self._loop.is_running():
            self._loop.close()

    async def _cancel_tasks(self) -> None:
        current = asyncio.current_task()
        tasks = [task for task in asyncio.all_tasks() if task is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _goodbye(self) -> None:
        if self._connection.is_connected:
            leaving = {"host": self.host_id, "role": self.role, "leaving": True}
            await self._send(self.cluster.heartbeat, json.dumps(leaving), {H_HOST: self.host_id})
            await self._connection.drain()
        else:
            await self._connection.close()

    async def _on_error(self, exc: Exception) -> None:
        log.warning("NATS: %s", exc)

    async def _on_disconnected(self) -> None:
        if not self._closed:
            log.warning("NATS: disconnected from %s; reconnecting", _shown(self.url))

    async def _on_reconnected(self) -> None:
        log.info("NATS: reconnected to %s", _shown(self.url))

    @property
    def connected(self) -> bool:
        return self._connection is not None and self._connection.is_connected

    # -- publishing: here, then to the other hosts ---------------------------------------

    def publish(self, sender: Participant, topic: str, payload: str, principal: Principal) -> ClusterDelivery:  # type: ignore[override]
        if self._is_local_only(topic):
            return ClusterDelivery(super().publish(sender, topic, payload, principal), None)
        if not self.connected:  # fail fast: a round that cannot reach the other hosts is not a round
            raise BusError(IpcErrorCode.UNKNOWN, f"the NATS server at {_shown(self.url)} is unreachable; retry shortly")
        local = super().publish(sender, topic, payload, principal)
        message = local.message
        message_id = f"{self.host_id}.{next(self._ids)}"
        tracked = self._track(message_id) if self._is_tracked(topic) else None
        headers = {
            H_SOURCE: message.source_id,
            H_KIND: principal.kind,
            H_NAME: principal.name or "",
            H_TIME: message.timestamp,
            H_HOST: self.host_id,
            H_MSG: message_id,
        }
        if tracing.on:  # the trace goes with the message: the other host's spans join it
            with tracing.span("nats publish", _messaging("send", topic, message_id), kind="producer"):
                tracing.inject(headers)
        asyncio.run_coroutine_threadsafe(self._send(topic, payload, headers), self._loop)
        return ClusterDelivery(local, tracked)

    async def _send(self, topic: str, payload: str, headers: dict[str, str]) -> None:
        try:
            await self._connection.publish(subject_for(topic), payload.encode("utf-8"), headers=headers or None)
        except Exception as exc:
            log.warning("NATS: cannot publish on %s: %s", topic, _reason(exc))

    def _track(self, message_id: str) -> _Tracked:
        with self._state_lock:
            capsule_hosts = {host: seen for host, seen in self._live_hosts().items() if seen.role == "capsules"}
            announced = {entry.rpartition("@")[2] for seen in capsule_hosts.values() for entry in seen.capsules}
            heard = {source for source, host in self._sources.items() if host in capsule_hosts}
            expected = frozenset(announced | heard)
            tracked = _Tracked(set(capsule_hosts), expected)
            waiting = tracked.waiting
            if not waiting:
                tracked.done.set()
                tracked.end("no_hosts")
            else:
                self._pending[message_id] = tracked
                if len(self._pending) > 4096:  # reports that never came (a host died): forget the oldest
                    self._pending.pop(next(iter(self._pending)))
        return tracked

    # -- receiving from the other hosts ----------------------------------------------------

    async def _on_nats_message(self, msg: Any) -> None:
        headers = msg.headers or {}
        origin = headers.get(H_HOST)
        if origin == self.host_id:
            return  # our own publish, already delivered here
        topic = msg.subject  # topics are concrete: subject and topic are the same text
        if topic == self.cluster.heartbeat:
            self._on_heartbeat(msg.data)
            return
        if topic.startswith(self.cluster.done_prefix):
            if topic == self.cluster.done_prefix + self.host_id:
                self._on_done(msg.data)
            return
        if self._is_local_only(topic) or origin is None:
            return
        message = self._remote_message(topic, msg.data, headers)
        if message is None:
            return
        with self._state_lock:
            self._sources[message.source_id] = origin
        # A span for the hop, a child of the publisher's (its `traceparent` header): the handlers
        # this message runs here (capsule calls) are its children, on whatever thread runs them.
        received = tracing.NO_SPAN
        if tracing.on:
            received = tracing.start(
                "nats receive",
                _messaging("receive", topic, headers.get(H_MSG)),
                kind="consumer",
                parent=tracing.extract(headers),
            )
        if received:
            with tracing.attached(tracing.context_of(received)):
                delivery = self._deliver(message)
        else:
            delivery = self._deliver(message)  # as stamped by its host: its ACL was checked there
        if self._is_tracked(topic) and headers.get(H_MSG):
            threading.Thread(
                target=self._report,
                args=(delivery, origin, headers[H_MSG], received),
                name="astrid-nats-report",
                daemon=True,
            ).start()
        else:
            received.end()

    def _remote_message(self, topic: str, data: bytes, headers: dict[str, str]) -> Message | None:
        """The message another host published, as it stamped it; None when malformed."""
        try:
            payload = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if topic_problem(topic) or len(data) > self.max_payload_bytes:
            return None
        kind, name = headers.get(H_KIND), headers.get(H_NAME) or None
        if kind == "verified" and name:
            principal = Principal.verified(name)
        elif kind == "claimed" and name:
            principal = Principal.claimed(name)
        elif kind == "system":
            principal = Principal.system()
        else:
            return None
        source = headers.get(H_SOURCE)
        if not source:
            return None
        return Message(topic, payload, source, principal, headers.get(H_TIME) or "", 0)

    def _report(
        self, delivery: InMemoryDelivery, origin: str, message_id: str, received: Any = tracing.NO_SPAN
    ) -> None:
        finished = delivery.wait(REPORT_WAIT_S)
        if received:  # the hop's span ends when this host's handlers have
            received.set_attributes({"astrid.nats.reached": len(delivery.reached), "astrid.nats.finished": finished})
            received.end()
        report = json.dumps({"message": message_id, "host": self.host_id, "reached": sorted(delivery.reached)})
        asyncio.run_coroutine_threadsafe(
            self._send(self.cluster.done_prefix + origin, report, {H_HOST: self.host_id}), self._loop
        )

    def _on_done(self, data: bytes) -> None:
        try:
            report = json.loads(data)
            message_id, host, reached = report["message"], report["host"], report["reached"]
        except (ValueError, KeyError, TypeError):
            return
        with self._state_lock:
            tracked = self._pending.get(message_id)
            if tracked is None or host not in tracked.waiting:
                return
            tracked.waiting.discard(host)
            tracked.reached.update(r for r in reached if isinstance(r, str))
            if not tracked.waiting:
                self._pending.pop(message_id, None)
                tracked.done.set()
                tracked.end("reported")

    # -- membership ----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        capsules: list[str] = []
        while not self._closed:
            try:  # the kernel may be busy loading: never let it hold up the loop (keep the last set)
                capsules = sorted(await asyncio.wait_for(asyncio.to_thread(self.capsule_set), HEARTBEAT_S / 2))
            except Exception:
                pass
            beat = {"host": self.host_id, "role": self.role, "capsules": capsules}
            if self._connection.is_connected:
                await self._send(self.cluster.heartbeat, json.dumps(beat), {H_HOST: self.host_id})
            self._expire()
            await asyncio.sleep(HEARTBEAT_S)

    def _on_heartbeat(self, data: bytes) -> None:
        try:
            beat = json.loads(data)
            host, role = beat["host"], beat["role"]
        except (ValueError, KeyError, TypeError):
            return
        changed = False
        with self._state_lock:
            known = self._hosts.get(host)
            if beat.get("leaving"):
                changed = self._hosts.pop(host, None) is not None
                self._release(host)
                self._sources = {source: seen for source, seen in self._sources.items() if seen != host}
            else:
                capsules = tuple(beat.get("capsules") or ())
                changed = known is None or known.capsules != capsules
                self._hosts[host] = _Host(role, capsules, time.monotonic())
        if changed:
            log.info("NATS: host %s (%s) %s", host[:8], role, "left" if beat.get("leaving") else "changed or joined")
            self._membership_changed()

    def _expire(self) -> None:
        now = time.monotonic()
        with self._state_lock:
            gone = [host for host, seen in self._hosts.items() if now - seen.seen > HOST_TIMEOUT_S]
            for host in gone:
                del self._hosts[host]
                self._release(host)
            self._sources = {source: host for source, host in self._sources.items() if host in self._hosts}
        for host in gone:
            log.warning("NATS: host %s stopped its heartbeat; treating it as gone", host[:8])
        if gone:
            self._membership_changed()

    def _membership_changed(self) -> None:
        """Tell the host, off the loop: what it does (re-announcing) may wait on the kernel."""
        threading.Thread(target=self.on_membership_change, name="astrid-nats-members", daemon=True).start()

    def _release(self, host: str) -> None:
        """A host is gone: no round waits for its report any more (call under the state lock)."""
        for message_id, tracked in list(self._pending.items()):
            tracked.waiting.discard(host)
            if not tracked.waiting:
                self._pending.pop(message_id, None)
                tracked.done.set()
                tracked.end("host_gone")

    def _live_hosts(self) -> dict[str, _Host]:
        now = time.monotonic()
        return {host: seen for host, seen in self._hosts.items() if now - seen.seen <= HOST_TIMEOUT_S}

    def hosts(self) -> dict[str, tuple[str, ...]]:
        """The other hosts alive now, with their capsule sets."""
        with self._state_lock:
            return {host: seen.capsules for host, seen in self._live_hosts().items()}

    # -- topics ------------------------------------------------------------------------------

    def _is_local_only(self, topic: str) -> bool:
        return not any(pattern_matches(pattern, topic) for pattern in self.shared)

    def _is_tracked(self, topic: str) -> bool:
        return any(pattern_matches(pattern, topic) for pattern in self.tracked)


def _messaging(operation: str, topic: str, message_id: str | None) -> dict[str, Any]:
    """A NATS hop's span attributes (OpenTelemetry's messaging conventions); never the payload."""
    attributes: dict[str, Any] = {
        "messaging.system": "nats",
        "messaging.operation.type": operation,
        "messaging.destination.name": topic,
    }
    if message_id:
        attributes["messaging.message.id"] = message_id
    return attributes


def _shown(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
