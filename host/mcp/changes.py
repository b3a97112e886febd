"""Who hears `notifications/resources/list_changed`, and when.

A notification is due when a principal's URI set differs from what a client
of that principal last saw. Two kinds of client see it:

- a handshake-era (2025-11-25) session, on its standalone channel: each
  session keeps its own baseline (what it last listed, or was told about);
- 2026-07-28 `subscriptions/listen` streams: one listen bus per principal,
  with the principal's last known set as the baseline. The same bus carries
  resource updates (`publish`, from `updates.Subscriptions`).

Nothing here crosses principals: a change of alice's set reaches alice's
sessions and streams only. A session is keyed by its connection (what lives
as long as the client) and forgotten when that connection closes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged, ServerEvent

log = logging.getLogger("astrid.host.mcp")


@dataclass
class _Session:
    principal: str
    session: ServerSession  # a proxy whose standalone channel is the connection's
    baseline: frozenset[str] | None = None


class ListChanged:
    """The baselines of every connected client, and the notifications they are due."""

    def __init__(self) -> None:
        self._sessions: dict[object, _Session] = {}  # by connection
        self._streams: dict[str, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        self._known: dict[str, frozenset[str]] = {}
        self.sent = 0  # principal-level changes announced (tests count them)

    def joined(self, connection: object) -> bool:
        return connection in self._sessions

    def join(self, connection: object, session: ServerSession, principal: str) -> None:
        """A handshake-era connection of `principal` is live: it hears its principal's changes."""
        self._sessions[connection] = _Session(principal, session, self._known.get(principal))

    def leave(self, connection: object) -> None:
        self._sessions.pop(connection, None)

    def listed(self, principal: str, uris: frozenset[str], connection: object | None = None) -> None:
        """A client of `principal` has just seen `uris`."""
        self._known[principal] = uris
        state = self._sessions.get(connection) if connection is not None else None
        if state is not None:
            state.baseline = uris

    def listen_handler(self, principal: str) -> ListenHandler:
        """The `subscriptions/listen` handler of `principal`'s streams."""
        if principal not in self._streams:
            bus = InMemorySubscriptionBus()
            self._streams[principal] = (bus, ListenHandler(bus))
        return self._streams[principal][1]

    async def publish(self, principal: str, event: ServerEvent) -> None:
        """`event` on `principal`'s listen bus: each of its open streams that asked for it hears it."""
        stream = self._streams.get(principal)
        if stream is not None:
            await stream[0].publish(event)

    def principals(self) -> set[str]:
        """Every principal with a live session or a listen bus."""
        return {state.principal for state in list(self._sessions.values())} | set(self._streams)

    async def reconcile(self, principal: str, current: frozenset[str]) -> bool:
        """Compare `principal`'s set now with each baseline; notify where it moved. True if any did."""
        changed = False
        known = self._known.get(principal)
        self._known[principal] = current
        if known is not None and known != current:
            changed = True
            stream = self._streams.get(principal)
            if stream is not None:
                await stream[0].publish(ResourcesListChanged())
        for state in list(self._sessions.values()):
            if state.principal != principal:
                continue
            if state.baseline is None:
                state.baseline = current
                continue
            if state.baseline != current:
                state.baseline = current
                changed = True
                await _notify(state.session, principal)
        if changed:
            self.sent += 1
            log.info("resource set of %s changed (%d uris): list_changed", principal, len(current))
        return changed

    def close(self) -> None:
        for _, handler in self._streams.values():
            handler.close()


async def _notify(session: ServerSession, principal: str) -> None:
    try:
        await session.send_resource_list_changed()
    except Exception as exc:  # the client may be gone
        log.warning("list_changed for %s not delivered: %s", principal, exc)
