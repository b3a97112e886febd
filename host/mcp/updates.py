"""Resource subscriptions: who is subscribed to which URI, and the updates they are due.

Two kinds of subscriber, both of one principal only:

- a handshake-era (2025-11-25) session: `resources/subscribe {uri}` until
  `resources/unsubscribe {uri}` or until its connection closes; an update is
  `notifications/resources/updated {uri}` on the session's standalone channel;
- a 2026-07-28 `subscriptions/listen` stream that named the URI in
  `resourceSubscriptions`, while it is open; an update is a `ResourceUpdated`
  event on its principal's listen bus (`changes.ListChanged`), which the
  SDK's listen handler tags with the stream's subscription id and delivers to
  the streams that asked for that URI only.

What the server checked before it took a subscription (that the principal
could read the URI, and who serves it) is its business; here each
subscription keeps the owner it was taken with, so a capsule-set change that
rebuilt or removed the owner updates the URI (`owners_changed`).

An update reaches the subscribers of the principal it was announced for,
never another's. Per principal and URI, at most one goes out per
`coalesce_s`: the first at once, and any later one in the window once, at its
end (so the last change is never lost). A principal holds at most
`subscriptions_per_principal` subscriptions over all its sessions and
streams (`room`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.session import ServerSession
from mcp.server.subscriptions import ResourceUpdated, ServerEvent

from astrid.host.limits import DEFAULT_SUBSCRIPTION_LIMITS, SubscriptionLimits
from astrid.host.tuning import MCP_TUNING

log = logging.getLogger("astrid.host.mcp")

Publish = Callable[[str, ServerEvent], Awaitable[None]]
Spawn = Callable[..., Any]


@dataclass
class _Holder:
    """A session's subscriptions (`session` set), or a listen stream's (`session` None)."""

    principal: str
    uris: dict[str, str | None] = field(default_factory=dict)  # uri -> its owner when subscribed
    session: ServerSession | None = None


class Subscriptions:
    def __init__(
        self,
        publish: Publish,
        limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish  # an event on a principal's listen bus (its open streams)
        self.limits = limits
        self._clock = clock
        self._holders: dict[object, _Holder] = {}  # by connection (a session) or by stream token
        self._last: dict[tuple[str, str], float] = {}  # when each (principal, uri) was last sent
        self._pending: set[tuple[str, str]] = set()  # due at the end of their window
        self.spawn: Spawn | None = None  # starts a task (the server's task group): the window's end
        self.sent = 0  # updates sent, one per (principal, uri) delivery (tests count them)

    # -- who holds what ----------------------------------------------------------------

    def count(self, principal: str) -> int:
        return sum(len(h.uris) for h in self._holders.values() if h.principal == principal)

    def room(self, principal: str, more: int) -> bool:
        """May `principal` take `more` subscriptions now?"""
        return self.count(principal) + more <= self.limits.subscriptions_per_principal

    def holds(self, connection: object, uri: str) -> bool:
        holder = self._holders.get(connection)
        return holder is not None and uri in holder.uris

    def joined(self, connection: object) -> bool:
        return connection in self._holders

    def subscribe(
        self, connection: object, session: ServerSession, principal: str, uri: str, owner: str | None
    ) -> None:
        """A handshake-era session of `principal` subscribes to `uri` (served by `owner`)."""
        holder = self._holders.get(connection)
        if holder is None:
            holder = self._holders[connection] = _Holder(principal, session=session)
        holder.uris[uri] = owner

    def unsubscribe(self, connection: object, uri: str) -> bool:
        holder = self._holders.get(connection)
        return holder is not None and holder.uris.pop(uri, 0) != 0

    def leave(self, connection: object) -> None:
        """The connection closed: its subscriptions end."""
        self._holders.pop(connection, None)

    def open_stream(self, principal: str, owners: dict[str, str | None]) -> object:
        """A listen stream of `principal` subscribed to `owners`' URIs; close it with `close_stream(token)`."""
        token = object()
        self._holders[token] = _Holder(principal, dict(owners))
        return token

    def close_stream(self, token: object) -> None:
        self._holders.pop(token, None)

    def subscribed(self, principal: str) -> dict[str, str | None]:
        """Every URI `principal` is subscribed to, with the owner it was subscribed under."""
        found: dict[str, str | None] = {}
        for holder in list(self._holders.values()):
            if holder.principal == principal:
                found.update(holder.uris)
        return found

    def principals(self) -> set[str]:
        return {holder.principal for holder in list(self._holders.values()) if holder.uris}

    def _wanted(self, principal: str, uri: str) -> bool:
        return any(h.principal == principal and uri in h.uris for h in list(self._holders.values()))

    # -- updates -----------------------------------------------------------------------

    async def updated(self, principal: str, uri: str) -> None:
        """`uri` changed for `principal`: tell its subscribers, at most once per window."""
        if not self._wanted(principal, uri):
            return
        key = (principal, uri)
        now = self._clock()
        last = self._last.get(key)
        window = self.limits.coalesce_s
        if last is None or now - last >= window or self.spawn is None:
            self._mark(key, now)
            await self._deliver(principal, uri)
            return
        if key in self._pending:
            return  # one goes out at the end of the window already: it carries this change too
        self._pending.add(key)
        self.spawn(self._at_window_end, key, last + window - now)

    async def _at_window_end(self, key: tuple[str, str], delay_s: float) -> None:
        try:
            await anyio.sleep(delay_s)
        finally:
            self._pending.discard(key)
        self._mark(key, self._clock())
        await self._deliver(*key)

    def _mark(self, key: tuple[str, str], now: float) -> None:
        self._last[key] = now
        if len(self._last) > MCP_TUNING.recent_updates_kept:  # forget what is past its window
            window = self.limits.coalesce_s
            self._last = {k: at for k, at in self._last.items() if now - at < window}

    async def _deliver(self, principal: str, uri: str) -> None:
        to_streams = False
        delivered = False
        for holder in list(self._holders.values()):
            if holder.principal != principal or uri not in holder.uris:
                continue
            delivered = True
            if holder.session is None:
                to_streams = True
                continue
            try:
                await holder.session.send_resource_updated(uri)
            except Exception as exc:  # the client may be gone
                log.warning("update of %s for %s not delivered: %s", uri, principal, exc)
        if to_streams:
            await self._publish(principal, ResourceUpdated(uri=uri))
        if delivered:
            self.sent += 1
            log.info("resource %s of %s updated: notified its subscribers", uri, principal)

    async def owners_changed(self, principal: str, owners: dict[str, str | None]) -> list[str]:
        """After a capsule-set change: `owners` is who serves each subscribed URI now. A URI whose
        owner was rebuilt or removed (another source-id, or none) is updated. The URIs updated."""
        moved: list[str] = []
        for uri, owner in sorted(owners.items()):
            changed = False
            for holder in list(self._holders.values()):
                if holder.principal == principal and uri in holder.uris and holder.uris[uri] != owner:
                    holder.uris[uri] = owner
                    changed = True
            if changed:
                moved.append(uri)
                await self.updated(principal, uri)
        return moved
