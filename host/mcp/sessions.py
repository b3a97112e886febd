"""Handshake-era (2025-11-25) sessions: a cap per principal, and none outliving its credential.

The SDK's session manager caps sessions for the whole server: one token
could open them all and lock every other principal out. Here each
principal has its own cap; at it, the principal's own oldest idle session
(no request in flight, no open stream) is closed to make room, else its
oldest session. A principal can only ever push out itself. The global cap
stays as the last bound.

Each session is also watched (`CredentialWatch`): when the credential that
opened it is revoked or expires, the session and its GET stream end.

This leans on three methods of the SDK's manager (`_handle_stateful_request`,
`_admit_session`, `_discard_session`) (mcp pinned at 2.3.0; tests/security holds the behaviour).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from astrid.host.mcp.credential_watch import CredentialWatch, Watched
from astrid.host.telemetry import metrics

log = logging.getLogger("astrid.host.mcp.http")
WARN_EVERY_S = 60.0

# The credential of the request being admitted (set per request task).
_opening_token: contextvars.ContextVar[AccessToken | None] = contextvars.ContextVar("opening_token", default=None)


@dataclass
class _Session:
    principal: str
    transport: StreamableHTTPServerTransport
    watched: Watched | None = None


class PrincipalSessionManager(StreamableHTTPSessionManager):
    def __init__(self, *args, sessions_per_principal: int, watch: CredentialWatch | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sessions_per_principal = sessions_per_principal
        self.watch = watch
        self._sessions: dict[str, _Session] = {}  # by session id, oldest first
        self._warned: dict[str, float] = {}

    def sessions_of(self, principal: str) -> int:
        return sum(1 for s in self._sessions.values() if s.principal == principal)

    def by_principal(self) -> dict[str, int]:
        """Open sessions per principal (for `--metrics`; `--no-auth` sessions as `_unauthenticated`)."""
        counts: dict[str, int] = {}
        for session in list(self._sessions.values()):
            principal = session.principal or "_unauthenticated"
            counts[principal] = counts.get(principal, 0) + 1
        return counts

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        forget = metrics.watch("astrid_sessions", lambda: metrics.top_principals(self.by_principal()))
        async with super().run(), anyio.create_task_group() as tg:
            if self.watch is not None:
                tg.start_soon(self.watch.run)
            try:
                yield
            finally:
                forget()
                tg.cancel_scope.cancel()

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        user = scope.get("user")
        token = _opening_token.set(user.access_token if isinstance(user, AuthenticatedUser) else None)
        try:
            await super()._handle_stateful_request(scope, receive, send)
        finally:
            _opening_token.reset(token)

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        principal = requestor["client_id"] if requestor is not None else ""
        if self.sessions_of(principal) >= self.sessions_per_principal:
            self._close_for_room(principal)
        transport = super()._admit_session(requestor)
        if transport is None or transport.mcp_session_id is None:
            return transport
        session = _Session(principal, transport)
        access = _opening_token.get()
        if self.watch is not None and access is not None:
            session.watched = self.watch.watch(access, "session", lambda: self._end(transport))
        self._sessions[transport.mcp_session_id] = session
        return transport

    def _close_for_room(self, principal: str) -> None:
        """Close `principal`'s oldest idle session, else its oldest one (never another principal's)."""
        own = [(sid, s) for sid, s in self._sessions.items() if s.principal == principal]
        idle = [(sid, s) for sid, s in own if not _busy(s.transport)]
        sid, session = (idle or own)[0]
        now = time.monotonic()
        if now - self._warned.get(principal, -WARN_EVERY_S) >= WARN_EVERY_S:  # once a minute per principal
            self._warned[principal] = now
            log.warning("%s opened more than %d sessions: closing its oldest", principal or "(anonymous)", len(own))
        self._forget(sid)
        self._server_instances.pop(sid, None)  # answers 404 from now on
        assert self._task_group is not None
        self._task_group.start_soon(self._end, session.transport)

    async def _end(self, transport: StreamableHTTPServerTransport) -> None:
        if transport.mcp_session_id is not None:
            await self._discard_session(transport.mcp_session_id, transport)

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        self._forget(session_id)
        await super()._discard_session(session_id, transport)

    def _forget(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and session.watched is not None and self.watch is not None:
            self.watch.forget(session.watched)


def _busy(transport: StreamableHTTPServerTransport) -> bool:
    """A request in flight, or an open GET stream (the SDK counts both)."""
    return bool(getattr(transport, "_requests_in_flight", 0))
