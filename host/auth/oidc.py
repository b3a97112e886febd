"""Verify OIDC / OAuth JWT access tokens against an issuer's published keys (JWKS), and name the principal.

The HTTP server serves many users; each request carries a bearer token that an
authorization server (an OIDC provider) signed. This module is the one place
that decides whether such a token is genuine and, if so, which principal it
names. It trusts nothing in the token until the signature checks out, and it
never needs a shared secret: the issuer's public keys come from its JWKS URL.

API (synchronous: the HTTP adapter calls it in a worker thread, off the event loop):

- `JwtVerifier(jwks_url, issuer, audience, principal_claim="sub", *, leeway=30,
  fetch_timeout=5, cache_lifespan=300, refresh_cooldown=30, failure_backoff=5)`
  refuses, with `AuthConfigError`, a JWKS URL that is not https (plain http is
  allowed on loopback only, for tests) and an empty issuer, audience or claim.
- `verify(token) -> Verified | None`: `Verified.principal` (the claim's value),
  `Verified.expires_at` (the `exp` claim, Unix seconds) and `Verified.scopes`
  (from `scope`, or a `scp` list). None when the token is refused.
- `identity_for(token) -> BearerIdentity | None`: principal and expiry, the
  form `IdentitySource` (`host/auth/principal.py`) asks for, so the HTTP
  adapter can set the MCP `AccessToken.expires_at`.
- `principal_for(token) -> str | None`: the thin form, the principal only
  (`PrincipalSource`).

What a token must be to pass:

- signed with RS256 or ES256 by a key of the JWKS that the header's `kid`
  names, and whose type fits the algorithm. `none` and HS256 are refused before
  any key is looked at: an HS256 token "signed" with the public key as the HMAC
  secret is the classic algorithm-confusion attack;
- carrying `exp` (not past, give or take `leeway` seconds), `iss` equal to the
  issuer and `aud` equal to, or a list holding, the audience; `nbf` and `iat`
  are checked when present;
- naming a principal: the `principal_claim` claim is a string that passes the
  principal-name grammar (`principal_problem`), since the name becomes a
  sandbox key and a bus stamp.

Every refusal returns None and logs a warning line that says why (expired,
wrong audience, wrong issuer, bad signature, unknown key, JWKS unreachable,
...), at most one per reason every `MCP_TUNING.refused_token_line_every_s`
seconds (the next says how many more there were): a sender of bad tokens
cannot flood the log.
The token is never logged, and neither is any claim value: what an attacker
sent must not be able to forge log lines. An unexpected error (a verifier bug)
is logged with its text, the token cut out and the text escaped to one line.

Keys: PyJWT's `PyJWKClient` fetches and caches the JWK set (`cache_lifespan`
seconds). A `kid` that is not in the cached set forces one refetch (the issuer
rotated its keys), but at most one per `refresh_cooldown` seconds, so a flood of
tokens with made-up `kid`s cannot turn this host into a JWKS hammer. Fetches
are serialized and time out after `fetch_timeout` seconds; after a failed fetch
the next `failure_backoff` seconds refuse at once instead of queuing behind
another slow fetch, so an unreachable JWKS endpoint cannot hang requests for
long (tokens whose key is in a still-fresh cached set keep passing). The cheap
checks (size, header, algorithm, kid) run before any key is fetched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from astrid.host.addresses import is_loopback
from astrid.host.auth.principal import BearerIdentity, principal_problem
from astrid.host.errors import AuthConfigError
from astrid.host.log_throttle import LogThrottles
from astrid.host.tuning import MCP_TUNING

log = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "ES256")
"""The only signature algorithms accepted: asymmetric, so a leaked JWKS signs nothing."""

MAX_TOKEN_CHARS = 16 * 1024
"""Longer bearer tokens are refused unparsed (real access tokens are a few KiB at most)."""

REQUIRED_CLAIMS = ("exp", "iss", "aud")

ERROR_TEXT_CHARS = 200
"""How much of an unexpected error's text a refusal line keeps."""


@dataclass(frozen=True, slots=True)
class Verified:
    """What a genuine token says: who it names, until when, and with which scopes."""

    principal: str
    expires_at: int
    scopes: tuple[str, ...] = ()


class _Refused(Exception):
    """Internal: why a token was refused, as a fixed phrase safe to log (never token content)."""


class JwtVerifier:
    """Checks JWT access tokens from one issuer for one audience; thread-safe, one per server."""

    def __init__(
        self,
        jwks_url: str,
        issuer: str,
        audience: str,
        principal_claim: str = "sub",
        *,
        leeway: float = 30.0,
        fetch_timeout: float = 5.0,
        cache_lifespan: float = 300.0,
        refresh_cooldown: float = 30.0,
        failure_backoff: float = 5.0,
    ) -> None:
        check_jwks_url(jwks_url)
        for name, value in (("issuer", issuer), ("audience", audience), ("principal_claim", principal_claim)):
            if not isinstance(value, str) or not value.strip():
                raise AuthConfigError(
                    f"the JWT verifier needs a non-empty {name}; set it to what the issuer's tokens carry"
                )
        if min(fetch_timeout, cache_lifespan) <= 0 or min(leeway, refresh_cooldown, failure_backoff) < 0:
            raise AuthConfigError(
                "JWT verifier timings: fetch_timeout and cache_lifespan must be > 0,"
                " leeway, refresh_cooldown and failure_backoff >= 0"
            )
        self.jwks_url = jwks_url
        self.issuer = issuer
        self.audience = audience
        self.principal_claim = principal_claim
        self.leeway = leeway
        self._keys = _KeySource(jwks_url, fetch_timeout, cache_lifespan, refresh_cooldown, failure_backoff)
        # by reason: fixed phrases, never token content
        self._refusal_lines = LogThrottles(MCP_TUNING.refused_token_line_every_s)

    def principal_for(self, token: str) -> str | None:
        """The principal a genuine token names, else None (the reason is logged)."""
        verified = self.verify(token)
        return verified.principal if verified is not None else None

    def identity_for(self, token: str) -> BearerIdentity | None:
        """The principal and expiry of a genuine token (`IdentitySource`), else None (the reason is logged)."""
        verified = self.verify(token)
        return BearerIdentity(verified.principal, verified.expires_at) if verified is not None else None

    def verify(self, token: str) -> Verified | None:
        """The principal, expiry and scopes of a genuine token, else None (a warning line says why)."""
        try:
            return self._verify(token)
        except _Refused as refused:
            self._say_refused(str(refused), str(refused))
            return None
        except Exception as exc:  # fail closed: a verifier bug must not let a token through, nor crash the request
            kind = f"unexpected {type(exc).__name__}"
            self._say_refused(kind, f"{kind} while verifying it: {_error_text(exc, token)}")
            return None

    def _say_refused(self, kind: str, reason: str) -> None:
        # Anyone can send bad tokens as fast as they like: one line per reason per period.
        skipped = self._refusal_lines.ready(kind)
        if skipped is not None:
            more = f" ({skipped} more refused for this reason since the last such line)" if skipped else ""
            log.warning("access token refused: %s%s", reason, more)

    def _verify(self, token: str) -> Verified:
        alg, kid = _screen_header(token)
        key = self._keys.key_for(kid)
        _check_key_fits(alg, key)
        claims = self._decode(token, alg, key)
        return Verified(
            principal=self._principal_of(claims),
            expires_at=int(claims["exp"]),
            scopes=_scopes_of(claims),
        )

    def _decode(self, token: str, alg: str, key: jwt.PyJWK) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except jwt.PyJWTError as exc:
            raise _Refused(_decode_reason(exc)) from None
        return claims

    def _principal_of(self, claims: Mapping[str, Any]) -> str:
        value = claims.get(self.principal_claim)
        if value is None:
            raise _Refused(f"the principal claim {self.principal_claim!r} is missing")
        if not isinstance(value, str):
            raise _Refused(f"the principal claim {self.principal_claim!r} is not a string")
        if principal_problem(value) is not None:
            # the problem text may quote the value, which the token's author chose: not logged
            raise _Refused(f"the principal claim {self.principal_claim!r} breaks the principal-name grammar")
        return value


def check_jwks_url(url: str) -> None:
    """Refuse a JWKS URL whose keys could be swapped in transit: https only, plain http on loopback only."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname:
        raise AuthConfigError(f"JWKS URL {url!r} is not an http(s) URL; give the issuer's https://.../jwks.json")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise AuthConfigError(
            f"JWKS URL {url!r} is plain http: anyone on the path could swap the signing keys; use https"
            " (plain http is allowed only on loopback, for tests)"
        )


def _screen_header(token: object) -> tuple[str, str]:
    """The header's algorithm and key id, checked before any key is fetched for this token."""
    if not isinstance(token, str) or not token:
        raise _Refused("no token")
    if len(token) > MAX_TOKEN_CHARS:
        raise _Refused(f"token longer than {MAX_TOKEN_CHARS} characters")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise _Refused("malformed token (not a JWS compact serialization)") from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise _Refused(f"algorithm not allowed (only {', '.join(ALGORITHMS)})")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise _Refused("no key id (kid) in the token header")
    return alg, kid


def _check_key_fits(alg: str, key: jwt.PyJWK) -> None:
    """The key the kid names must be meant for the token's algorithm: its JWK `alg` (declared, or implied by
    its type) is `alg`, and its material is of that type (an RSA key never checks an ES256 token)."""
    material = key.key
    if alg == "RS256":
        typed = isinstance(material, rsa.RSAPublicKey)
    else:
        typed = isinstance(material, ec.EllipticCurvePublicKey) and isinstance(material.curve, ec.SECP256R1)
    if not typed or key.algorithm_name != alg:
        raise _Refused(f"the key the token names is not a {alg} key")


def _decode_reason(exc: jwt.PyJWTError) -> str:
    """A fixed phrase for each way PyJWT refuses a token (its messages are fixed too, but these name the fix)."""
    reasons: tuple[tuple[type[jwt.PyJWTError], str], ...] = (
        (jwt.ExpiredSignatureError, "expired (exp is past)"),
        (jwt.ImmatureSignatureError, "not yet valid (nbf or iat in the future)"),
        (jwt.InvalidAudienceError, "wrong audience (aud does not hold this server's audience)"),
        (jwt.InvalidIssuerError, "wrong issuer (iss is not the configured issuer)"),
        (jwt.exceptions.InvalidSubjectError, "the 'sub' claim is not a string"),
        (jwt.exceptions.InvalidJTIError, "the 'jti' claim is not a string"),
        (jwt.InvalidIssuedAtError, "the 'iat' claim is not a number"),
        (jwt.InvalidSignatureError, "bad signature"),
        (jwt.InvalidAlgorithmError, f"algorithm not allowed (only {', '.join(ALGORITHMS)})"),
        (jwt.InvalidKeyError, "the key the token names does not fit its algorithm"),
        (jwt.DecodeError, "malformed token"),
    )
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the required claim {exc.claim!r} is missing"  # one of REQUIRED_CLAIMS: not the sender's text
    return next((reason for kind, reason in reasons if isinstance(exc, kind)), f"invalid token ({type(exc).__name__})")


def _error_text(exc: Exception, token: object) -> str:
    """An unexpected error's own words for the log: the token and its parts cut out, escaped to one line, bounded."""
    text = str(exc)
    if isinstance(token, str) and token:
        parts = [token, *(part for part in token.split(".") if len(part) >= 8)]
        for part in sorted(parts, key=len, reverse=True):
            text = text.replace(part, "<token>")
    return ascii(text[:ERROR_TEXT_CHARS])


def _scopes_of(claims: Mapping[str, Any]) -> tuple[str, ...]:
    """OAuth scopes: the space-separated `scope` string (RFC 9068), else a `scp` list (Azure AD, Okta)."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return tuple(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, list) and all(isinstance(item, str) for item in scp):
        return tuple(scp)
    return ()


class _KeySource:
    """The issuer's signing keys: PyJWKClient's cached JWK set, with a bounded refetch on an unknown kid."""

    def __init__(
        self, url: str, fetch_timeout: float, cache_lifespan: float, refresh_cooldown: float, failure_backoff: float
    ) -> None:
        self._client = jwt.PyJWKClient(url, cache_jwk_set=True, lifespan=cache_lifespan, timeout=fetch_timeout)
        self._refresh_cooldown = refresh_cooldown
        self._failure_backoff = failure_backoff
        self._lock = threading.Lock()
        self._last_refresh: float | None = None
        self._last_failure: float | None = None

    def key_for(self, kid: str) -> jwt.PyJWK:
        """The signing key `kid` names; refetches the set once (per cooldown) when the kid is unknown."""
        with self._lock:
            key = self._match(self._signing_keys(refresh=False), kid)
            if key is None and self._may_refresh():
                self._last_refresh = time.monotonic()
                key = self._match(self._signing_keys(refresh=True), kid)
        if key is None:
            raise _Refused("unknown key (no key in the issuer's JWKS has the token's kid)")
        return key

    def _may_refresh(self) -> bool:
        return self._last_refresh is None or time.monotonic() - self._last_refresh >= self._refresh_cooldown

    def _signing_keys(self, *, refresh: bool) -> list[jwt.PyJWK]:
        """The set's signing keys: from the cache while it is fresh, else fetched (unless backing off)."""
        fetching = refresh or not self._has_fresh_set()
        if fetching and self._last_failure is not None:
            if time.monotonic() - self._last_failure < self._failure_backoff:
                raise _Refused(f"JWKS unreachable (a fetch failed less than {self._failure_backoff:g} s ago)")
        try:
            keys = self._client.get_signing_keys(refresh=refresh)
        except jwt.PyJWKClientConnectionError:
            self._last_failure = time.monotonic()
            raise _Refused(f"JWKS unreachable (fetching {self._client.uri} failed or timed out)") from None
        except (jwt.PyJWTError, ValueError):  # not JSON, not a JWK set, or no signing key with a kid in it
            self._last_failure = time.monotonic()
            raise _Refused(f"JWKS unusable ({self._client.uri} served no usable signing keys)") from None
        if fetching:
            self._last_failure = None
        return keys

    def _has_fresh_set(self) -> bool:
        cache = self._client.jwk_set_cache
        return cache is not None and cache.get() is not None

    @staticmethod
    def _match(keys: list[jwt.PyJWK], kid: str) -> jwt.PyJWK | None:
        return next((key for key in keys if key.key_id == kid), None)
