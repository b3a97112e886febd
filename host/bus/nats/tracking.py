"""The publisher's side of tracked messages: the rounds still owed a report, the done reports and
claims that settle them, and a request published again when the replica running it died."""

from __future__ import annotations

import asyncio
import json
import logging
import time

from astrid.host.bus.nats.connection import Connection
from astrid.host.bus.nats.envelope import H_RETRY
from astrid.host.bus.nats.membership import Membership
from astrid.host.bus.nats.rounds import Claim, Round
from astrid.host.tuning import NATS_TUNING

log = logging.getLogger(__package__)  # log lines keep naming astrid.host.bus.nats


class Tracker:
    """The rounds of the tracked messages published here, until every host owing one reported."""

    def __init__(self, connection: Connection, members: Membership) -> None:
        self._connection = connection
        self._members = members
        self._lock = members.lock
        self._pending: dict[str, Round] = {}

    def track(self, message_id: str) -> Round:
        """A round waiting for every capsule host alive now (and each queue group they serve)."""
        with self._lock:
            capsule_hosts = {host: seen for host, seen in self._members.live().items() if seen.role == "capsules"}
            expected = self._members.served_by(capsule_hosts)
            groups = {group for seen in capsule_hosts.values() for group in seen.groups}
            tracked = Round(set(capsule_hosts), expected, groups=groups)
            if not tracked.settle("no_hosts"):
                self._pending[message_id] = tracked
                if len(self._pending) > 4096:  # reports that never came (a host died): forget the oldest
                    self._pending.pop(next(iter(self._pending)))
        return tracked

    def on_done(self, data: bytes) -> None:
        """A report, claim or pong on this host's done topic."""
        try:
            report = json.loads(data)
            host = report["host"]
            if not isinstance(host, str):
                return
            now = time.monotonic()
            if report.get("pong"):
                with self._lock:
                    self._members.heard(host, now)
                return
            message_id, group = report["message"], report.get("group")
            reached = () if report.get("claim") else report["reached"]
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        with self._lock:
            self._members.heard(host, now)
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
                tracked.claims[group] = Claim(host, now)
                return
            else:
                tracked.groups.discard(group)
            tracked.reached.update(r for r in reached if isinstance(r, str))
            if tracked.settle("reported"):
                self._pending.pop(message_id, None)

    # -- replicas: a request whose replica died is published again for its group ------------

    async def watch(self) -> None:
        while not self._connection.closed:
            await asyncio.sleep(NATS_TUNING.watch_s)
            try:
                self._check_claims()
            except Exception:  # never let the watch die
                log.exception("NATS: the replica watch failed")

    def _check_claims(self) -> None:
        now = time.monotonic()
        ping: set[str] = set()
        with self._lock:
            for tracked in list(self._pending.values()):
                for group in list(tracked.groups):
                    claim = tracked.claims.get(group)
                    if claim is None:
                        if now - tracked.started > NATS_TUNING.unclaimed_s and group not in tracked.retried:
                            self._retry(tracked, group)
                        continue
                    if now - claim.at < NATS_TUNING.probe_after_s:
                        continue
                    if self._members.silent(claim.host, now):
                        log.warning("NATS: host %s stopped answering mid-request; retrying elsewhere", claim.host[:8])
                        self._retry(tracked, group)
                    elif self._members.answered(claim.host):
                        ping.add(claim.host)  # not pinged yet, or it answered the last ping: ask again
        self._members.ping(ping, now)

    def _retry(self, tracked: Round, group: str) -> None:
        """Publish a request again for one group, once (call under the state lock, on the loop)."""
        tracked.claims.pop(group, None)
        if group in tracked.retried or tracked.resend is None:
            return
        tracked.retried.add(group)
        topic, payload, headers = tracked.resend
        self._connection.submit(self._connection.send(topic, payload, {**headers, H_RETRY: group}))

    # -- hosts going (Membership calls these under the lock) ---------------------------------------

    def release(self, host: str) -> None:
        """A host is gone: no round waits for its report any more, and what it claimed
        goes to another replica (after dropping the host)."""
        for tracked in self._pending.values():
            tracked.waiting.discard(host)
            for group, claim in list(tracked.claims.items()):
                if claim.host == host:
                    self._retry(tracked, group)
        self.prune()

    def prune(self) -> None:
        """No round waits for a group no live host serves any more."""
        served = self._members.served_groups()
        for message_id, tracked in list(self._pending.items()):
            tracked.groups &= served
            if tracked.settle("host_gone"):
                self._pending.pop(message_id, None)
