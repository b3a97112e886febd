"""Bearer tokens to MCP `AccessToken`s: the MCP SDK's `TokenVerifier` in front of astrid's principal sources.

The streamable HTTP transport asks a `TokenVerifier` (mcp 2.3.0,
`mcp.server.auth.provider`) who a request's bearer token stands for. astrid's
sources answer that question synchronously and know nothing of MCP: the
static token file (`astrid.host.auth.TokenStore`) and the OIDC verifier
(`astrid.host.auth.oidc.JwtVerifier`). `BearerVerifier` adapts any of them:

- the source runs in a worker thread (it may read a file or fetch a JWKS), never
  on the event loop;
- the principal becomes both `client_id` and `subject` of the `AccessToken`,
  which is what the SDK compares to bind a session to its principal;
- a source that knows expiry (`IdentitySource`) sets `expires_at`, which the
  SDK's bearer middleware enforces;
- a principal name that breaks the grammar (`principal_problem`) is refused,
  whatever the source said, since it would become a sandbox key and a bus stamp;
- a source that fails (a corrupt or unsafe token file) refuses the token and
  logs why, once per distinct problem: fail closed, no traceback per request;
- why a token is refused goes to the access log's failed-login line
  (`access.note_refusal`), which names the client address, never the token.
"""

from __future__ import annotations

import logging
import time

import anyio.to_thread
from mcp.server.auth.provider import AccessToken

from astrid.host.auth.principal import BearerIdentity, IdentitySource, PrincipalSource, principal_problem
from astrid.host.errors import AstridError
from astrid.host.mcp.access import note_refusal

log = logging.getLogger("astrid.host.mcp.auth")


class BearerVerifier:
    """A `TokenVerifier` over any `PrincipalSource` (or `IdentitySource`).

    `resource`, when given, is stamped on every `AccessToken` as the RFC 8707
    resource it was issued for: set it to the server's URL when the SDK is
    told to check token resources (static tokens are issued for this server
    only).
    """

    def __init__(self, source: PrincipalSource | IdentitySource, *, resource: str | None = None) -> None:
        self.source = source
        self.resource = resource
        self._last_failure: str | None = None

    async def verify_token(self, token: str) -> AccessToken | None:
        identity, refusal = await anyio.to_thread.run_sync(self._identify_why, token)
        if identity is None:
            note_refusal(refusal or "the token was refused")
            return None
        if identity.expires_at is not None and identity.expires_at < time.time():
            note_refusal("the token has expired")  # the SDK refuses it too
        return AccessToken(
            token=token,
            client_id=identity.principal,
            subject=identity.principal,
            scopes=[],
            expires_at=identity.expires_at,
            resource=self.resource,
        )

    def _identify(self, token: str) -> BearerIdentity | None:
        """The source's answer, with a checked principal name; None to refuse (runs in a worker thread)."""
        return self._identify_why(token)[0]

    def _identify_why(self, token: str) -> tuple[BearerIdentity | None, str | None]:
        """`_identify`, and why a token is refused (never the token itself)."""
        try:
            identity = self._ask(token)
        except AstridError as exc:  # the source cannot decide: refuse, and say why once
            self._log_failure(str(exc))
            return None, "the token source cannot be used (logged once above)"
        self._last_failure = None
        if identity is None:
            if isinstance(self.source, IdentitySource):  # OIDC: its verifier logged why
                return None, "the access token is not valid (expired, wrong issuer, audience or signature, ...)"
            return None, "unknown or revoked token"
        problem = principal_problem(identity.principal)
        if problem:
            log.warning("bearer token refused: its principal name is not valid (%s)", problem)
            return None, "the principal name it names is not valid"
        return identity, None

    def _ask(self, token: str) -> BearerIdentity | None:
        if isinstance(self.source, IdentitySource):
            return self.source.identity_for(token)
        principal = self.source.principal_for(token)
        return None if principal is None else BearerIdentity(principal)

    def _log_failure(self, message: str) -> None:
        if message != self._last_failure:
            log.error("bearer tokens refused: %s", message)
        self._last_failure = message
