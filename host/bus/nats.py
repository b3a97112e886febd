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
re-announces capsule sets, so clients get list_changed) only when the set of
capsules served changes: a replica joining or leaving changes nothing a client sees.

Replicas: a capsule host subscribes to the requests once per capsule it
runs, in a NATS queue group named by the capsule's source-id (its name and
build digest), so the same capsule on several hosts forms one group and
each request reaches one replica of it. Its handlers alone get what came
through its group; a plain subscription brings the rest (host participants
outside any group). The receiving replica claims the request at once and
reports when done, per group; the publisher waits for every group its live
hosts announce. A claim whose host stops answering pings (`PONG_WAIT_S`), or a
group nobody claimed within `UNCLAIMED_S`, is published once more for that
group alone (`H_RETRY`): a replica dying mid-request costs about a second,
inside the read window.

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
from astrid.host.bus.topics import ClusterTopics, pattern_matches, topic_problem
from astrid.host.errors import BusError
from astrid.host.limits import DEFAULT_LIMITS
from astrid.host.telemetry import metrics, tracing

log = logging.getLogger(__name__)

HEARTBEAT_S = 1.0
HOST_TIMEOUT_S = 3.5
CONNECT_TIMEOUT_S = 5.0
REPORT_WAIT_S = 10.0  # how long a host waits for its own handlers before reporting anyway
WATCH_S = 0.1  # how often the publisher looks at claimed requests still running
PROBE_AFTER_S = 0.3  # a claim older than this: ping its host
PONG_WAIT_S = 0.6  # a pinged host silent this long is taken for dead: its claims are retried
UNCLAIMED_S = 0.8  # a group nobody claimed by then (its replica died on receipt): retried

# The envelope, in NATS headers.
H_SOURCE, H_KIND, H_NAME, H_TIME, H_HOST, H_MSG = (
    "astrid-source",
    "astrid-principal-kind",
    "astrid-principal",
    "astrid-timestamp",
    "astrid-host",
    "astrid-message",
)
H_RETRY = "astrid-retry-group"  # a request published again for one group (a replica died)


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


@dataclass
class _Host:
    role: str
    capsules: tuple[str, ...]
    seen: float
    groups: frozenset[str] = frozenset()  # the queue groups it serves requests in


@dataclass
class _Claim:
    host: str
    at: float


@dataclass
class _Tracked:
    """The remote side of one published message: which hosts still owe a report."""

    waiting: set[str]
    expected: frozenset[str] = frozenset()  # the source-ids the live hosts said they run
    reached: set[str] = field(default_factory=set)  # what the reports said
    done: threading.Event = field(default_factory=threading.Event)
    groups: set[str] = field(default_factory=set)  # the queue groups still owing a report
    claims: dict[str, _Claim] = field(default_factory=dict)  # group -> the replica running it
    retried: set[str] = field(default_factory=set)  # groups already published again (once each)
    started: float = field(default_factory=time.monotonic)
    resend: tuple[str, str, dict[str, str]] | None = None  # topic, payload, headers: for a retry
    ended: str | None = None  # how the round ended, once (for `--metrics`)

    def settle(self, how: str) -> bool:
        """Set done when nothing is owed any more (counted as ending `how`); True then."""
        if not self.waiting and not self.groups:
            self.done.set()
            self.end(how)
            return True
        return False

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
        # the requests this host hears, in one queue group per capsule (replicas share the load)
        self._group_patterns = tuple(p for p in self.listen if p in self.tracked)
        self._groups: dict[str, list[Any]] = {}  # group (source-id) -> its NATS subscriptions
        self._grouped: frozenset[str] = frozenset()
        self._contact: dict[str, float] = {}  # host -> when it was last heard from
        self._pinged: dict[str, float] = {}  # host -> when it was last pinged
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
        if self.tracked:
            self._loop.create_task(self._watch_claims())

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
            # out of every queue group first: what the others publish again on our goodbye must reach a replica
            await self._sync_groups(set())
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

    def call(self, coroutine: Any, timeout_s: float) -> Any:
        """Run a coroutine on the NATS loop and wait for its result (from any other thread)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise

    def jetstream(self) -> Any:
        """The connection's JetStream context (on the NATS loop only)."""
        return self._connection.jetstream()

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
        if tracked is not None and tracked.groups:
            tracked.resend = (topic, payload, headers)
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
            groups = {group for seen in capsule_hosts.values() for group in seen.groups}
            tracked = _Tracked(set(capsule_hosts), expected, groups=groups)
            if not tracked.settle("no_hosts"):
                self._pending[message_id] = tracked
                if len(self._pending) > 4096:  # reports that never came (a host died): forget the oldest
                    self._pending.pop(next(iter(self._pending)))
        return tracked

    # -- receiving from the other hosts ----------------------------------------------------

    async def _on_nats_message(self, msg: Any, group: str | None = None) -> None:
        """A message from NATS; `group`: it came through that capsule's queue group."""
        headers = msg.headers or {}
        origin = headers.get(H_HOST)
        if origin == self.host_id:
            return  # our own publish, already delivered here
        topic = msg.subject  # topics are concrete: subject and topic are the same text
        if group is None:
            if topic == self.cluster.heartbeat:
                self._on_heartbeat(msg.data)
                return
            if topic.startswith(self.cluster.done_prefix):
                if topic == self.cluster.done_prefix + self.host_id:
                    self._on_done(msg.data)
                return
            if topic.startswith(self.cluster.ping_prefix):
                if topic == self.cluster.ping_prefix + self.host_id and origin:
                    pong = json.dumps({"pong": True, "host": self.host_id})
                    await self._send(self.cluster.done_prefix + origin, pong, {H_HOST: self.host_id})
                return
        if self._is_local_only(topic) or origin is None:
            return
        retry = headers.get(H_RETRY)
        if retry is not None and retry != group:
            return  # published again for another capsule's group only
        message = self._remote_message(topic, msg.data, headers)
        if message is None:
            return
        with self._state_lock:
            self._sources[message.source_id] = origin
        tracked = self._is_tracked(topic) and headers.get(H_MSG)
        if group is not None and tracked:  # claim it first: the asker retries it if we die mid-way
            claim = json.dumps({"message": headers[H_MSG], "host": self.host_id, "group": group, "claim": True})
            await self._send(self.cluster.done_prefix + origin, claim, {H_HOST: self.host_id})
        grouped = self._grouped
        # as stamped by its host (its ACL was checked there); a group's message to that capsule alone
        only = (lambda source: source == group) if group is not None else (lambda source: source not in grouped)
        # A span for the hop, a child of the publisher's (its `traceparent` header): the handlers
        # this message runs here (capsule calls) are its children, on whatever thread runs them.
        # None where it reaches nobody (a request this host's replicas take through their group).
        received = tracing.NO_SPAN
        if tracing.on and self._would_reach(topic, only):
            received = tracing.start(
                "nats receive",
                _messaging("receive", topic, headers.get(H_MSG)),
                kind="consumer",
                parent=tracing.extract(headers),
            )
        if received:
            with tracing.attached(tracing.context_of(received)):
                delivery = self._deliver(message, only)
        else:
            delivery = self._deliver(message, only)
        if tracked:
            threading.Thread(
                target=self._report,
                args=(delivery, origin, headers[H_MSG], group, received),
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
        self,
        delivery: InMemoryDelivery,
        origin: str,
        message_id: str,
        group: str | None = None,
        received: Any = tracing.NO_SPAN,
    ) -> None:
        finished = delivery.wait(REPORT_WAIT_S)
        if received:  # the hop's span ends when this host's handlers have
            received.set_attributes({"astrid.nats.reached": len(delivery.reached), "astrid.nats.finished": finished})
            received.end()
        report = json.dumps(
            {"message": message_id, "host": self.host_id, "reached": sorted(delivery.reached), "group": group}
        )
        if self._closed:
            return  # a handler that outlived the connection: nobody to tell
        try:
            asyncio.run_coroutine_threadsafe(
                self._send(self.cluster.done_prefix + origin, report, {H_HOST: self.host_id}), self._loop
            )
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _on_done(self, data: bytes) -> None:
        try:
            report = json.loads(data)
            host = report["host"]
            if not isinstance(host, str):
                return
            now = time.monotonic()
            if report.get("pong"):
                with self._state_lock:
                    self._contact[host] = now
                return
            message_id, group = report["message"], report.get("group")
            reached = () if report.get("claim") else report["reached"]
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        with self._state_lock:
            self._contact[host] = now
            tracked = self._pending.get(message_id)
            if tracked is None:
                return
            if group is None:
                if host not in tracked.waiting:
                    return
                tracked.waiting.discard(host)
            elif group not in tracked.groups:
                return
            elif report.get("claim"):
                tracked.claims[group] = _Claim(host, now)
                return
            else:
                tracked.groups.discard(group)
            tracked.reached.update(r for r in reached if isinstance(r, str))
            if tracked.settle("reported"):
                self._pending.pop(message_id, None)

    # -- replicas: a request whose replica died is published again for its group ------------

    async def _watch_claims(self) -> None:
        while not self._closed:
            await asyncio.sleep(WATCH_S)
            try:
                self._check_claims()
            except Exception:  # never let the watch die
                log.exception("NATS: the replica watch failed")

    def _check_claims(self) -> None:
        now = time.monotonic()
        ping: set[str] = set()
        with self._state_lock:
            for tracked in list(self._pending.values()):
                for group in list(tracked.groups):
                    claim = tracked.claims.get(group)
                    if claim is None:
                        if now - tracked.started > UNCLAIMED_S and group not in tracked.retried:
                            self._retry(tracked, group)
                        continue
                    if now - claim.at < PROBE_AFTER_S:
                        continue
                    pinged = self._pinged.get(claim.host)
                    heard = self._contact.get(claim.host, 0.0)
                    if pinged is not None and heard < pinged and now - pinged > PONG_WAIT_S:
                        log.warning("NATS: host %s stopped answering mid-request; retrying elsewhere", claim.host[:8])
                        self._retry(tracked, group)
                    elif pinged is None or heard >= pinged:
                        ping.add(claim.host)  # not pinged yet, or it answered the last ping: ask again
        for host in ping:
            self._pinged[host] = now
            self._loop.create_task(self._send(self.cluster.ping_prefix + host, "{}", {H_HOST: self.host_id}))

    def _retry(self, tracked: _Tracked, group: str) -> None:
        """Publish a request again for one group, once (call under the state lock, on the loop)."""
        tracked.claims.pop(group, None)
        if group in tracked.retried or tracked.resend is None:
            return
        tracked.retried.add(group)
        topic, payload, headers = tracked.resend
        asyncio.run_coroutine_threadsafe(self._send(topic, payload, {**headers, H_RETRY: group}), self._loop)

    # -- membership ----------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        capsules: list[str] = []
        while not self._closed:
            try:  # the kernel may be busy loading: never let it hold up the loop (keep the last set)
                capsules = sorted(await asyncio.wait_for(asyncio.to_thread(self.capsule_set), HEARTBEAT_S / 2))
            except Exception:
                pass
            if self._closed:
                break  # closing began while we waited: no beat (nor groups) after the goodbye
            if self._group_patterns and self._connection.is_connected:
                await self._sync_groups({entry.rpartition("@")[2] for entry in capsules})
            beat = {"host": self.host_id, "role": self.role, "capsules": capsules, "groups": sorted(self._grouped)}
            if self._connection.is_connected and not self._closed:
                await self._send(self.cluster.heartbeat, json.dumps(beat), {H_HOST: self.host_id})
            self._expire()
            await asyncio.sleep(HEARTBEAT_S)

    async def _sync_groups(self, wanted: set[str]) -> None:
        """One queue group per capsule run here, named by its source-id (name and build digest)."""
        if self._closed:
            wanted = set()  # leaving: out of every group, never back in
        for group in sorted(wanted - self._groups.keys()):
            subscriptions = []
            for pattern in self._group_patterns:

                async def through_group(msg: Any, group: str = group) -> None:
                    await self._on_nats_message(msg, group)

                subscriptions.append(
                    await self._connection.subscribe(subject_for(pattern), queue=group, cb=through_group)
                )
            self._groups[group] = subscriptions
        gone = set(self._groups) - wanted
        # the group set changes before the old subscriptions go: a request in between may reach a
        # capsule twice (the broker keeps one reply), never not at all
        self._grouped = frozenset(wanted)
        for group in gone:
            for subscription in self._groups.pop(group):
                try:
                    await subscription.unsubscribe()
                except Exception:
                    pass
        await self._connection.flush()

    def _on_heartbeat(self, data: bytes) -> None:
        try:
            beat = json.loads(data)
            host, role = beat["host"], beat["role"]
            groups = frozenset(g for g in beat.get("groups") or () if isinstance(g, str))
        except (ValueError, KeyError, TypeError):
            return
        with self._state_lock:
            before = self._served()
            self._contact[host] = time.monotonic()
            if beat.get("leaving"):
                self._hosts.pop(host, None)
                self._release(host)
                self._sources = {source: seen for source, seen in self._sources.items() if seen != host}
            else:
                capsules = tuple(beat.get("capsules") or ())
                known = self._hosts.get(host)
                self._hosts[host] = _Host(role, capsules, time.monotonic(), groups)
                if known is not None and known.groups != groups:
                    self._prune_groups()
            changed = self._served() != before
        if changed:  # the capsules served changed (a replica more or less changes nothing)
            log.info("NATS: host %s (%s) %s", host[:8], role, "left" if beat.get("leaving") else "changed or joined")
            self._membership_changed()

    def _served(self) -> frozenset[str]:
        """Every capsule the live hosts run (call under the state lock)."""
        return frozenset(entry for seen in self._live_hosts().values() for entry in seen.capsules)

    def _expire(self) -> None:
        now = time.monotonic()
        with self._state_lock:
            before = frozenset(entry for seen in self._hosts.values() for entry in seen.capsules)
            gone = [host for host, seen in self._hosts.items() if now - seen.seen > HOST_TIMEOUT_S]
            for host in gone:
                del self._hosts[host]
                self._contact.pop(host, None)
                self._pinged.pop(host, None)
                self._release(host)
            self._sources = {source: host for source, host in self._sources.items() if host in self._hosts}
            changed = self._served() != before
        for host in gone:
            log.warning("NATS: host %s stopped its heartbeat; treating it as gone", host[:8])
        if changed:
            self._membership_changed()

    def _membership_changed(self) -> None:
        """Tell the host, off the loop: what it does (re-announcing) may wait on the kernel."""
        threading.Thread(target=self.on_membership_change, name="astrid-nats-members", daemon=True).start()

    def _release(self, host: str) -> None:
        """A host is gone: no round waits for its report any more, and what it claimed
        goes to another replica (call under the state lock, after dropping the host)."""
        for tracked in self._pending.values():
            tracked.waiting.discard(host)
            for group, claim in list(tracked.claims.items()):
                if claim.host == host:
                    self._retry(tracked, group)
        self._prune_groups()

    def _prune_groups(self) -> None:
        """No round waits for a group no live host serves any more (call under the state lock)."""
        served = {group for seen in self._live_hosts().values() if seen.role == "capsules" for group in seen.groups}
        for message_id, tracked in list(self._pending.items()):
            tracked.groups &= served
            if tracked.settle("host_gone"):
                self._pending.pop(message_id, None)

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
