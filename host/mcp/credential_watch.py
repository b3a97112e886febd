"""Sessions and streams live only as long as the credential that opened them.

A request is authenticated when it arrives, but a handshake-era session's
GET stream and a 2026-07-28 `subscriptions/listen` stream stay open for as
long as the client likes. Revoking a static token, or a JWT passing its
`exp`, must end them too: otherwise the holder keeps hearing that
principal's notifications. Every so often each distinct credential is
verified again (a static token: one stat of the token file; a JWT: its
expiry and signature, no network while its key is cached); whatever it
opened is ended when it no longer verifies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from mcp.server.auth.provider import AccessToken, TokenVerifier

log = logging.getLogger("astrid.host.mcp.http")

End = Callable[[], Awaitable[None]]


@dataclass(eq=False)
class Watched:
    token: AccessToken
    what: str  # "session" or "stream", for the log
    end: End


class CredentialWatch:
    def __init__(self, verifier: TokenVerifier, *, every_s: float, clock: Callable[[], float] = time.time) -> None:
        self.verifier = verifier
        self.every_s = every_s
        self._clock = clock
        self._watched: set[Watched] = set()
        self.ended = 0  # sessions and streams ended so far (tests read it)

    def watch(self, token: AccessToken, what: str, end: End) -> Watched:
        """Keep `end` to call once `token` stops verifying; forget the returned handle when it closes."""
        watched = Watched(token, what, end)
        self._watched.add(watched)
        return watched

    def forget(self, watched: Watched) -> None:
        self._watched.discard(watched)

    def open_count(self) -> int:
        return len(self._watched)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.every_s)
            await self.check()

    async def check(self) -> None:
        """Verify each distinct credential once; end what a failing one opened."""
        by_token: dict[str, list[Watched]] = {}
        for watched in list(self._watched):
            by_token.setdefault(watched.token.token, []).append(watched)
        for token, opened in by_token.items():
            why = await self._failure(opened[0].token, token)
            if why is None:
                continue
            kinds = ", ".join(sorted({w.what for w in opened}))
            log.warning(
                "ending %d open %s of %s: its credential %s", len(opened), kinds, opened[0].token.client_id, why
            )
            for watched in opened:
                self.forget(watched)
                self.ended += 1
                await watched.end()

    async def _failure(self, access: AccessToken, token: str) -> str | None:
        if access.expires_at is not None and access.expires_at <= self._clock():
            return "expired"
        try:
            verified = await self.verifier.verify_token(token)
        except Exception as exc:  # the source cannot decide now: keep what is open, try again later
            log.warning("cannot check open credentials now: %s", exc)
            return None
        if verified is None:
            return "is no longer valid (revoked?)"
        if verified.client_id != access.client_id:
            return "now names another principal"
        return None
