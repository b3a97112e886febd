"""Connection limits of the HTTP front door, below anything that needs a credential.

A connection costs a file descriptor before anyone is authenticated, so an
attacker with no token could otherwise hold them all: idle sockets, request
heads trickled a byte at a time, bodies that never end. The guard keeps:

- a cap on open connections, and one per client address;
- a deadline for the request head (from the moment the connection is ready
  for a request) and one for the body (from the end of the head);
- uvicorn's keep-alive timeout between requests.

At a cap, the newcomer does not simply lose: the oldest connection still
*waiting* (for its head or its body) makes room, taken from the address that
holds the most. Connections whose request is being answered, and open
streams, are never evicted: they belong to clients that got past the auth.
So a flood of idle sockets churns only itself while real requests go on.

uvicorn runs the protocol; the guard sees each connection's phase through
h11's own state (`their_state`). Deadlines are enforced by one sweep task.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from astrid.host.limits import HttpLimits
from astrid.host.log_throttle import LogThrottles
from astrid.host.tuning import MCP_TUNING

log = logging.getLogger("astrid.host.mcp.http")

REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


class Phase(Enum):
    HEAD = "waiting for the request head"
    BODY = "waiting for the request body"
    ANSWERING = "answering"  # the app has the request (or streams to it): never evicted


@dataclass
class _Connection:
    client: str
    phase: Phase
    since: float


class ConnectionGuard:
    """Every open connection, its phase, and the caps and deadlines over them."""

    def __init__(self, limits: HttpLimits, *, clock=time.monotonic) -> None:
        self.limits = limits
        self.max_connections = limits.connections
        self._clock = clock
        self._open: dict[Any, _Connection] = {}  # protocol -> state, oldest first
        self._per_client: Counter[str] = Counter()
        self.closed: Counter[str] = Counter()  # why connections were closed, since the last report
        self._reported_at = clock()

    def __len__(self) -> int:
        return len(self._open)

    def per_client(self, client: str) -> int:
        return self._per_client[client]

    def admit(self, protocol: Any, client: str) -> bool:
        """Count a new connection; make room at a cap. False: refuse it (nothing waits to evict)."""
        self._open[protocol] = _Connection(client, Phase.HEAD, self._clock())
        self._per_client[client] += 1
        per_client = self.limits.connections_per_client
        if per_client and self._per_client[client] > per_client:
            if not self._make_room(protocol, self._oldest_waiting(client), "per-client cap"):
                return False
        if len(self._open) > self.max_connections:
            if not self._make_room(protocol, self._oldest_waiting_of_heaviest(), "connection cap"):
                return False
        return True

    def moved(self, protocol: Any, phase: Phase) -> None:
        """The connection's phase now; its deadline starts over when the phase changes."""
        state = self._open.get(protocol)
        if state is not None and state.phase is not phase:
            state.phase, state.since = phase, self._clock()

    def ready_again(self, protocol: Any) -> None:
        """A response ended: the connection waits for its next request head from now."""
        state = self._open.get(protocol)
        if state is not None:
            state.phase, state.since = Phase.HEAD, self._clock()

    def forget(self, protocol: Any) -> None:
        state = self._open.pop(protocol, None)
        if state is not None:
            self._per_client[state.client] -= 1
            if not self._per_client[state.client]:
                del self._per_client[state.client]

    def sweep(self) -> None:
        """Close every connection past its phase's deadline; report closures now and then."""
        now = self._clock()
        deadlines = {Phase.HEAD: self.limits.header_timeout_s, Phase.BODY: self.limits.body_timeout_s}
        late = [
            (protocol, state.phase)
            for protocol, state in self._open.items()
            if state.phase in deadlines and now - state.since > deadlines[state.phase]
        ]
        for protocol, phase in late:
            self._close(protocol, "head deadline" if phase is Phase.HEAD else "body deadline")
        if self.closed and now - self._reported_at >= MCP_TUNING.connection_report_every_s:
            reasons = ", ".join(f"{count} at the {why}" for why, count in sorted(self.closed.items()))
            log.warning("closed connections in the last %.0f s: %s", now - self._reported_at, reasons)
            self.closed.clear()
            self._reported_at = now

    def _make_room(self, newcomer: Any, victim: Any, why: str) -> bool:
        """Close `victim` for `newcomer`; when there is none (or it is the newcomer), refuse the newcomer."""
        if victim is None or victim is newcomer:
            self._close(newcomer, why, refuse=True)
            return False
        self._close(victim, why)
        return True

    def _oldest_waiting(self, client: str) -> Any:
        for protocol, state in self._open.items():  # oldest first
            if state.client == client and state.phase is not Phase.ANSWERING:
                return protocol
        return None

    def _oldest_waiting_of_heaviest(self) -> Any:
        for client, _ in self._per_client.most_common():
            victim = self._oldest_waiting(client)
            if victim is not None:
                return victim
        return None

    def _close(self, protocol: Any, why: str, *, refuse: bool = False) -> None:
        self.closed[why] += 1
        self.forget(protocol)
        transport = getattr(protocol, "transport", None)
        if transport is not None and not transport.is_closing():
            if refuse:
                transport.write(REFUSAL)
            transport.close()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, reporting each connection's phase to the guard."""

    guard: ConnectionGuard  # set on the subclass `guarded_protocol` makes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else "unknown"
        self.guard.admit(self, client)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self.guard.moved(self, _phase_of(self.conn))

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:
            self.guard.ready_again(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.forget(self)
        super().connection_lost(exc)


def _phase_of(conn: h11.Connection) -> Phase:
    if conn.their_state is h11.IDLE:
        return Phase.HEAD
    if conn.their_state is h11.SEND_BODY:
        return Phase.BODY
    return Phase.ANSWERING


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """The protocol class uvicorn instantiates per connection, bound to `guard`."""
    return type("AstridH11Protocol", (GuardedH11Protocol,), {"guard": guard})


class GuardedServer(uvicorn.Server):
    """uvicorn's server with the guard's sweep and quiet accept errors on its loop."""

    def __init__(self, config: uvicorn.Config, guard: ConnectionGuard) -> None:
        super().__init__(config)
        self.guard = guard

    async def serve(self, sockets=None) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(RateLimitedLoopErrors().handle)
        sweeper = loop.create_task(self._sweep())
        try:
            await super().serve(sockets)
        finally:
            sweeper.cancel()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(MCP_TUNING.connection_sweep_every_s)
            self.guard.sweep()


class RateLimitedLoopErrors:
    """The event loop's error reports, each kind at most once per `every_s`.

    Out of descriptors, asyncio reports every failed accept; at a few
    thousand a second that is a log flood on top of the outage."""

    def __init__(self, every_s: float = 5.0, *, clock=time.monotonic) -> None:
        self._lines = LogThrottles(every_s, clock=clock)

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        kind = str(context.get("message", "event loop error"))  # asyncio's own fixed phrases
        suppressed = self._lines.ready(kind)
        if suppressed is None:
            return
        exc = context.get("exception")
        detail = f": {exc}" if exc is not None else ""
        more = f" ({suppressed} more like it not logged)" if suppressed else ""
        log.error("%s%s%s", kind, detail, more)


def raise_fd_limit() -> int:
    """Raise this process's soft descriptor limit to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft == resource.RLIM_INFINITY or target <= soft:
        return soft if soft != resource.RLIM_INFINITY else target
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # some systems cap below the hard limit (nr_open)
        return soft
    return target


def connection_cap(limits: HttpLimits, fd_limit: int) -> int:
    """The connection cap that fits under `fd_limit` with room for the rest of the server."""
    return max(16, min(limits.connections, fd_limit - MCP_TUNING.reserved_fds))
