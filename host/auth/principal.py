"""Who a request runs as: the one grammar of a principal name, and what a bearer-token check answers.

A principal name reaches the host from several doors: `--principal`, a static
token's entry in the token file, a claim of an OIDC token. Each door checks it
with `principal_problem`, so a name one door accepts is a name every door
accepts, and a name that could not be typed or shown as one line (control
characters, surrounding spaces) never becomes anyone's identity.

`PrincipalSource` is what turns a bearer token into a principal, whatever the
kind of token (`TokenStore` for static tokens, the OIDC verifier for JWTs).
The MCP layer adapts any source to the MCP SDK's `TokenVerifier`
(`astrid.host.mcp.auth.BearerVerifier`). A source that also knows when a token
expires implements `IdentitySource` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

PRINCIPAL_MAX = 128
PRINCIPAL_RULE = f"use 1-{PRINCIPAL_MAX} printable characters without surrounding spaces"


def principal_problem(name: object) -> str | None:
    """What is wrong with `name` as a principal name (a phrase naming the fix), or None when it is fine.

    The rule: a string of 1-`PRINCIPAL_MAX` printable characters with no
    surrounding whitespace.
    """
    if not isinstance(name, str):
        return f"a principal name is a string, not {type(name).__name__}; {PRINCIPAL_RULE}"
    if not 1 <= len(name) <= PRINCIPAL_MAX or not name.isprintable() or name != name.strip():
        return PRINCIPAL_RULE
    return None


@dataclass(frozen=True)
class BearerIdentity:
    """Whom a bearer token stands for, and until when (`expires_at`: Unix seconds, None for no expiry)."""

    principal: str
    expires_at: int | None = None


@runtime_checkable
class PrincipalSource(Protocol):
    """Turns a bearer token into the principal it belongs to. Synchronous: callers run it in a worker thread."""

    def principal_for(self, token: str) -> str | None:
        """The principal whose token this is, or None for a token it does not accept."""
        ...


@runtime_checkable
class IdentitySource(Protocol):
    """A `PrincipalSource` that also knows when a token expires (e.g. a JWT's `exp`)."""

    def principal_for(self, token: str) -> str | None: ...

    def identity_for(self, token: str) -> BearerIdentity | None:
        """The principal and expiry of this token, or None for a token it does not accept."""
        ...
