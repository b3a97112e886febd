"""Handshake-era (2025-11-25) sessions: a cap per principal, and none outliving its credential.

The SDK's session manager caps sessions for the whole server: one token
could open them all and lock every other principal out. Here each
principal has its own cap; at it, the principal's own oldest idle session
(no request in flight, no open stream) is closed to make room, else its
oldest session. A principal can only ever push out itself. The global cap
stays as the last bound.

Each session is also watched (`CredentialWatch`): when the credential that
opened it is revoked or expires, the session and its GET stream end.

The SDK's manager has no hook for admission or discard: `SessionManagerHooks`
(`sdk_internals.py`, pinned to mcp 2.3.0) adds them; tests/security holds the
behaviour.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import StreamableHTTPServerTransport
from starlette.types import Scope

from astrid.host.mcp.credential_watch import CredentialWatch, Watched
from astrid.host.mcp.sdk_internals import SessionManagerHooks, requests_in_flight
from astrid.host.telemetry import metrics
from astrid.host.tuning import MCP_TUNING

log = logging.getLogger("astrid.host.mcp.http")

# The credential of the request being admitted (set per request task).
_opening_token: contextvars.ContextVar[AccessToken | None] = contextvars.ContextVar("opening_token", default=None)


@dataclass
class _Session:
    principal: str
    transport: StreamableHTTPServerTransport
    watched: Watched | None = None


class PrincipalSessionManager(SessionManagerHooks):
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

    @contextlib.contextmanager
    def around_request(self, scope: Scope) -> Iterator[None]:
        """The request's verified credential in `_opening_token`, for `admitted` to watch."""
        user = scope.get("user")
        token = _opening_token.set(user.access_token if isinstance(user, AuthenticatedUser) else None)
        try:
            yield
        finally:
            _opening_token.reset(token)

    def admitting(self, requestor: AuthorizationContext | None) -> None:
        principal = requestor["client_id"] if requestor is not None else ""
        if self.sessions_of(principal) >= self.sessions_per_principal:
            self._close_for_room(principal)

    def admitted(self, requestor: AuthorizationContext | None, transport: StreamableHTTPServerTransport) -> None:
        principal = requestor["client_id"] if requestor is not None else ""
        session = _Session(principal, transport)
        access = _opening_token.get()
        if self.watch is not None and access is not None:
            session.watched = self.watch.watch(access, "session", lambda: self.discard(transport))
        assert transport.mcp_session_id is not None
        self._sessions[transport.mcp_session_id] = session

    def _close_for_room(self, principal: str) -> None:
        """Close `principal`'s oldest idle session, else its oldest one (never another principal's)."""
        own = [(sid, s) for sid, s in self._sessions.items() if s.principal == principal]
        idle = [(sid, s) for sid, s in own if not _busy(s.transport)]
        sid, session = (idle or own)[0]
        now, every_s = time.monotonic(), MCP_TUNING.session_cap_warn_every_s
        if now - self._warned.get(principal, -every_s) >= every_s:  # once a minute per principal
            self._warned[principal] = now
            log.warning("%s opened more than %d sessions: closing its oldest", principal or "(anonymous)", len(own))
        self._forget(sid)
        self.unroute(sid)  # answers 404 from now on
        self.start_soon(self.discard, session.transport)

    def discarding(self, session_id: str) -> None:
        self._forget(session_id)

    def _forget(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and session.watched is not None and self.watch is not None:
            self.watch.forget(session.watched)


def _busy(transport: StreamableHTTPServerTransport) -> bool:
    """A request in flight, or an open GET stream (the SDK counts both)."""
    return bool(requests_in_flight(transport))
