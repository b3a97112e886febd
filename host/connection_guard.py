"""Connection limits of a listener, below anything that needs a credential.

A connection costs a file descriptor before anyone is authenticated, so an
attacker with no token could otherwise hold them all: idle sockets, request
heads trickled a byte at a time, bodies that never end. The guard keeps:

- a cap on open connections, and one per client address;
- a deadline for the request head (from the moment the connection is ready
  for a request) and one for the body (from the end of the head).

At a cap, the newcomer does not simply lose: the oldest connection still
*waiting* (for its head or its body) makes room, taken from the address that
holds the most. Connections whose request is being answered, and open
streams, are never evicted: they belong to clients that got past the auth.
So a flood of idle sockets churns only itself while real requests go on.

The guard only keeps the books; the server that owns the sockets tells it
each connection's phase and calls `sweep()` now and then. It closes a
connection through the connection's `transport` (`write`, `close`,
`is_closing`: an asyncio transport, or anything that acts like one). Two
servers use it: the MCP HTTP front door (`mcp/connections.py`, on uvicorn's
event loop) and the metrics listener (`telemetry/listener.py`, on threads,
which call it under a lock). It imports nothing heavy: a stdio server with
`--metrics` loads no HTTP framework for it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from astrid.host.tuning import MCP_TUNING

REFUSAL = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"


class ConnectionLimits(Protocol):
    """What the guard reads of its limits (`HttpLimits` for the MCP front door)."""

    @property
    def connections(self) -> int: ...

    @property
    def connections_per_client(self) -> int: ...  # 0: no per-address cap

    @property
    def header_timeout_s(self) -> float: ...

    @property
    def body_timeout_s(self) -> float: ...


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
    """Every open connection, its phase, and the caps and deadlines over them.

    `log` gets the periodic report of closed connections, which names them `what`."""

    def __init__(
        self,
        limits: ConnectionLimits,
        *,
        log: logging.Logger,
        what: str = "connections",
        clock=time.monotonic,
    ) -> None:
        self.limits = limits
        self.max_connections = limits.connections
        self._log = log
        self._what = what
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
            self._log.warning("closed %s in the last %.0f s: %s", self._what, now - self._reported_at, reasons)
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
