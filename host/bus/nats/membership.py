"""The other hosts: who is alive and what it runs (heartbeats, goodbyes, expiry), and pings."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from astrid.host.bus.nats.connection import Connection, reason
from astrid.host.bus.nats.envelope import H_HOST
from astrid.host.bus.nats.groups import QueueGroups
from astrid.host.bus.topics import ClusterTopics
from astrid.host.log_throttle import LogThrottle
from astrid.host.tuning import NATS_TUNING

log = logging.getLogger(__package__)  # log lines keep naming astrid.host.bus.nats


@dataclass
class Host:
    role: str
    capsules: tuple[str, ...]
    seen: float
    groups: frozenset[str] = frozenset()  # the queue groups it serves requests in
    # source-id -> the signature record it shows for that capsule (opaque here: the broker's
    # process verifies it against its own trust store before it believes a word of it)
    claims: Mapping[str, str] = field(default_factory=dict)


class Membership:
    """What this host knows of the others, from their heartbeats and answers."""

    def __init__(
        self, connection: Connection, cluster: ClusterTopics, host_id: str, role: str, changed: Callable[[], None]
    ) -> None:
        self._connection = connection
        self._cluster = cluster
        self._host_id = host_id
        self._role = role
        self._changed = changed  # the set of capsules served changed
        # One lock for this and the tracker's rounds: a host's going releases its rounds in the same step.
        self.lock = threading.Lock()
        self.hosts: dict[str, Host] = {}
        self.sources: dict[str, str] = {}  # a remote participant's source-id -> the host it speaks from
        self._contact: dict[str, float] = {}  # host -> when it was last heard from
        self._pinged: dict[str, float] = {}  # host -> when it was last pinged
        # What the tracker does, under the lock, when a host goes or a host's groups change.
        self.released: Callable[[str], None] = lambda host: None
        self.regrouped: Callable[[], None] = lambda: None
        self._beat_now = asyncio.Event()  # set (on the loop) by `beat_soon`
        self._sync_lines = LogThrottle(NATS_TUNING.failure_line_every_s)

    # -- this host's beat ---------------------------------------------------------------

    async def beat(
        self,
        capsule_set: Callable[[], Sequence[str]],
        capsule_claims: Callable[[], Mapping[str, str]],
        groups: QueueGroups,
    ) -> None:
        """Every heartbeat (`NATS_TUNING.heartbeat_s`): join the queue groups of the capsules run here,
        announce them (with the claim of who each signed one is), expire the silent."""
        capsules: list[str] = []
        claims: dict[str, str] = {}

        def announced() -> tuple[list[str], dict[str, str]]:
            return sorted(capsule_set()), dict(capsule_claims())

        while not self._connection.closed:
            try:  # the kernel may be busy loading: never let it hold up the loop (keep the last set)
                capsules, claims = await asyncio.wait_for(asyncio.to_thread(announced), NATS_TUNING.heartbeat_s / 2)
            except Exception:
                log.debug("this host's capsule set not read in time; the last one is announced", exc_info=True)
            if self._connection.closed:
                break  # closing began while we waited: no beat (nor groups) after the goodbye
            if groups.patterns and self._connection.connected:
                try:
                    await groups.sync({entry.rpartition("@")[2] for entry in capsules})
                except Exception as exc:  # beat on regardless: a host that stops beating is taken for dead
                    self._sync_failed(exc)
            beat: dict[str, object] = {
                "host": self._host_id,
                "role": self._role,
                "capsules": capsules,
                "groups": sorted(groups.grouped),
            }
            if claims:
                beat["claims"] = claims
            if self._connection.connected and not self._connection.closed:
                await self._send(self._cluster.heartbeat, json.dumps(beat))
            self.expire()
            with contextlib.suppress(TimeoutError):  # the heartbeat's period is over: beat again
                await asyncio.wait_for(self._beat_now.wait(), NATS_TUNING.heartbeat_s)
            self._beat_now.clear()

    def beat_soon(self) -> None:
        """Beat now, not at the next heartbeat (from any thread): the capsule set changed, and the
        MCP servers re-describe once they hear it (until then they route reads to the old build)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: no more beats anyway
            self._connection.loop.call_soon_threadsafe(self._beat_now.set)

    def _sync_failed(self, exc: Exception) -> None:
        skipped = self._sync_lines.ready()
        if skipped is not None:
            more = f" ({skipped} more since the last line)" if skipped else ""
            log.warning("NATS: cannot update this host's queue groups: %s; retrying every beat%s", reason(exc), more)
            log.debug("the queue-group update failed", exc_info=True)

    async def goodbye(self) -> None:
        """Say we leave: the others drop us at once."""
        leaving = {"host": self._host_id, "role": self._role, "leaving": True}
        await self._send(self._cluster.heartbeat, json.dumps(leaving))

    # -- the others' beats ------------------------------------------------------------------

    def on_heartbeat(self, data: bytes) -> None:
        try:
            beat = json.loads(data)
            host, role = beat["host"], beat["role"]
            groups = frozenset(g for g in beat.get("groups") or () if isinstance(g, str))
            claims = _claims(beat.get("claims"))
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        with self.lock:
            before = self._served()
            self._contact[host] = time.monotonic()
            known = self.hosts.get(host)
            if beat.get("leaving"):
                self.hosts.pop(host, None)
                self.released(host)
                self.sources = {source: seen for source, seen in self.sources.items() if seen != host}
                reclaimed = known is not None and bool(known.claims)
            else:
                capsules = tuple(beat.get("capsules") or ())
                self.hosts[host] = Host(role, capsules, time.monotonic(), groups, claims)
                if known is not None and known.groups != groups:
                    self.regrouped()
                # who a capsule is may decide what it serves: a changed claim is heard as a change
                reclaimed = (known.claims if known is not None else {}) != claims
            changed = reclaimed or self._served() != before
        if changed:  # the capsules served changed (a replica more or less changes nothing)
            log.info("NATS: host %s (%s) %s", host[:8], role, "left" if beat.get("leaving") else "changed or joined")
            self._membership_changed()

    def expire(self) -> None:
        now = time.monotonic()
        with self.lock:
            before = self.served_by(self.hosts)
            gone = [host for host, seen in self.hosts.items() if now - seen.seen > NATS_TUNING.host_timeout_s]
            for host in gone:
                del self.hosts[host]
                self._contact.pop(host, None)
                self._pinged.pop(host, None)
                self.released(host)
            self.sources = {source: host for source, host in self.sources.items() if host in self.hosts}
            changed = self._served() != before
        for host in gone:
            log.warning("NATS: host %s stopped its heartbeat; treating it as gone", host[:8])
        if changed:
            self._membership_changed()

    def _membership_changed(self) -> None:
        """Tell the host, off the loop: what it does (re-announcing) may wait on the kernel."""
        threading.Thread(target=self._changed, name="astrid-nats-members", daemon=True).start()

    # -- who is alive (call these under the lock) ------------------------------------------------

    def live(self) -> dict[str, Host]:
        now = time.monotonic()
        return {host: seen for host, seen in self.hosts.items() if now - seen.seen <= NATS_TUNING.host_timeout_s}

    def _served(self) -> frozenset[str]:
        """Every capsule the live hosts run."""
        return self.served_by(self.live())

    def served_by(self, hosts: Mapping[str, Host]) -> frozenset[str]:
        """The source-ids of the capsules `hosts` run: announced in their heartbeats, or heard
        answering from a capsule host already (an MCP host's speakers are its askers). A capsule
        answers as soon as it is loaded, which may be before the heartbeat that announces it; a
        host that leaves then still takes it away."""
        announced = {entry.rpartition("@")[2] for seen in hosts.values() for entry in seen.capsules}
        heard = {source for source, host in self.sources.items() if host in hosts and hosts[host].role == "capsules"}
        return frozenset(announced | heard)

    def served_groups(self) -> set[str]:
        """The queue groups the live capsule hosts serve."""
        return {group for seen in self.live().values() if seen.role == "capsules" for group in seen.groups}

    def heard(self, host: str, now: float) -> None:
        self._contact[host] = now

    def silent(self, host: str, now: float) -> bool:
        """Pinged, and not heard from for `NATS_TUNING.pong_wait_s` since: taken for dead."""
        pinged = self._pinged.get(host)
        return pinged is not None and self._contact.get(host, 0.0) < pinged and now - pinged > NATS_TUNING.pong_wait_s

    def answered(self, host: str) -> bool:
        """Not pinged yet, or it answered the last ping: it may be asked again."""
        pinged = self._pinged.get(host)
        return pinged is None or self._contact.get(host, 0.0) >= pinged

    # -- from any thread ------------------------------------------------------------------

    def spoke(self, source_id: str, host: str) -> None:
        """A remote participant spoke from `host`."""
        with self.lock:
            self.sources[source_id] = host

    def claims_of(self, source_id: str) -> tuple[str, ...]:
        """What the live hosts claim of `source_id` (each distinct claim once, in order)."""
        with self.lock:
            found = {seen.claims[source_id] for seen in self.live().values() if source_id in seen.claims}
        return tuple(sorted(found))

    def alive(self) -> dict[str, tuple[str, ...]]:
        """The other hosts alive now, with their capsule sets."""
        with self.lock:
            return {host: seen.capsules for host, seen in self.live().items()}

    def by_role(self) -> list[tuple[tuple[str, ...], float]]:
        """The other hosts alive now, counted by role (the `astrid_nats_hosts` gauge)."""
        with self.lock:
            live = list(self.live().values())
        counts: dict[str, int] = {}
        for seen in live:
            counts[seen.role] = counts.get(seen.role, 0) + 1
        return [((role,), float(count)) for role, count in sorted(counts.items())]

    # -- pings (on the loop) ------------------------------------------------------------------

    def ping(self, hosts: Iterable[str], now: float) -> None:
        for host in hosts:
            self._pinged[host] = now
            self._connection.loop.create_task(self._send(self._cluster.ping_prefix + host, "{}"))

    async def pong(self, origin: str) -> None:
        pong = json.dumps({"pong": True, "host": self._host_id})
        await self._send(self._cluster.done_prefix + origin, pong)

    async def _send(self, topic: str, payload: str) -> None:
        await self._connection.send(topic, payload, {H_HOST: self._host_id})


def _claims(value: object) -> dict[str, str]:
    """A heartbeat's claims: source-id -> text; anything else in it is dropped (a claim is checked later)."""
    if not isinstance(value, dict):
        return {}
    return {source: claim for source, claim in value.items() if isinstance(source, str) and isinstance(claim, str)}
