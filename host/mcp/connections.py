"""The HTTP front door's connections under uvicorn: the connection guard wired into its protocol.

A connection costs a file descriptor before anyone is authenticated, so an
attacker with no token could otherwise hold them all: idle sockets, request
heads trickled a byte at a time, bodies that never end. The guard
(`host/connection_guard.py`, shared with the metrics listener) keeps a cap
on open connections and one per client address, and deadlines for the
request head and body; uvicorn's keep-alive timeout closes idle connections
between requests. At a cap, the oldest connection still *waiting* makes
room; connections being answered, and open streams, are never evicted.

uvicorn runs the protocol; the guard sees each connection's phase through
h11's own state (`their_state`). Deadlines are enforced by one sweep task.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from astrid.host import connection_guard
from astrid.host.connection_guard import Phase
from astrid.host.limits import HttpLimits
from astrid.host.log_throttle import LogThrottles
from astrid.host.tuning import MCP_TUNING

log = logging.getLogger("astrid.host.mcp.http")


class ConnectionGuard(connection_guard.ConnectionGuard):
    """The shared guard, reporting on the front door's logger."""

    def __init__(self, limits: HttpLimits, *, clock=time.monotonic) -> None:
        super().__init__(limits, log=log, clock=clock)


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
    """uvicorn's server with the guard's sweep and quiet accept errors on its loop; `on_exit` runs on
    the first Ctrl-C or SIGTERM, in the signal handler (it must take no lock)."""

    def __init__(self, config: uvicorn.Config, guard: ConnectionGuard, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self.guard = guard
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:  # at the signal, not once the requests in flight are done
            self.on_exit()
        super().handle_exit(sig, frame)

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
