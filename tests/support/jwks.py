"""A fake OIDC issuer for the JWT verifier's tests: key pairs, a JWKS served on loopback, and token minting.

`serve_jwks()` starts a tiny threaded `http.server` on `127.0.0.1:<free port>`
that serves the issuer's public keys at `/jwks.json` and counts the requests it
answered (`Issuer.requests`), so a test can see the verifier's cache at work.
The issuer starts with one RSA key (kid `rsa-1`, RS256) and one EC P-256 key
(kid `ec-1`, ES256); `add_key` publishes another (a rotation), `stall` makes
the endpoint hang (a slow JWKS), `mint` signs tokens with any key it holds,
published or not, and `forge` builds tokens no honest issuer would (`alg:
none`, HS256 with the public key as the HMAC secret).

The test modules wrap `serve_jwks()` in their own fixtures; this module holds
no fixture (see `tests/support/__init__.py`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.support.processes import free_port

ISSUER = "https://issuer.test"
AUDIENCE = "https://astrid.test/mcp"
JWKS_PATH = "/jwks.json"

KeyKind = Literal["rsa", "ec"]
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
ALG_OF: dict[KeyKind, str] = {"rsa": "RS256", "ec": "ES256"}


@dataclass
class SigningKey:
    kid: str
    kind: KeyKind
    private: PrivateKey

    @property
    def alg(self) -> str:
        return ALG_OF[self.kind]

    def public_jwk(self) -> dict[str, Any]:
        private = self.private
        if isinstance(private, rsa.RSAPrivateKey):
            exported = RSAAlgorithm.to_jwk(private.public_key())
        else:
            exported = ECAlgorithm.to_jwk(private.public_key())
        return {**json.loads(exported), "kid": self.kid, "alg": self.alg, "use": "sig"}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )


def new_key(kind: KeyKind, kid: str) -> SigningKey:
    """A fresh key pair: RSA 2048 or EC P-256."""
    private: PrivateKey = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if kind == "rsa"
        else ec.generate_private_key(ec.SECP256R1())
    )
    return SigningKey(kid, kind, private)


class Issuer:
    """The keys an issuer holds, which of them its JWKS publishes, and the requests that JWKS answered."""

    def __init__(self) -> None:
        self.keys: dict[str, SigningKey] = {}
        self.published: list[str] = []
        self.requests = 0
        self.url = ""
        self._lock = threading.Lock()
        self._stalled = threading.Event()
        self._released = threading.Event()
        self.add_key("rsa", "rsa-1")
        self.add_key("ec", "ec-1")

    def add_key(self, kind: KeyKind, kid: str, *, publish: bool = True) -> SigningKey:
        """Generate a key; publish it in the JWKS unless `publish=False` (a key the verifier must not trust)."""
        key = new_key(kind, kid)
        with self._lock:
            self.keys[kid] = key
            if publish:
                self.published.append(kid)
        return key

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            return {"keys": [self.keys[kid].public_jwk() for kid in self.published]}

    def stall(self) -> None:
        """From now on the JWKS endpoint accepts requests and never answers them (until the server stops)."""
        self._stalled.set()

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """Claims a genuine token for this issuer and audience carries (valid for an hour), with `overrides`."""
        now = int(time.time())
        return {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 3600, **overrides}

    def mint(
        self,
        claims: Mapping[str, Any],
        key: KeyKind = "rsa",
        kid: str | None = None,
        alg: str | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> str:
        """A token signed by the key `kid` (default: the first key of kind `key`), with `alg` (default: its own)."""
        signing = self.keys[kid] if kid is not None else self._first(key)
        header = {"kid": signing.kid, **(headers or {})}
        return jwt.encode(dict(claims), signing.private, algorithm=alg or signing.alg, headers=header)

    def _first(self, kind: KeyKind) -> SigningKey:
        return next(key for key in self.keys.values() if key.kind == kind)

    def count(self) -> None:
        with self._lock:
            self.requests += 1

    def wait_if_stalled(self) -> None:
        if self._stalled.is_set():
            self._released.wait()

    def release(self) -> None:
        self._released.set()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def forge(header: Mapping[str, Any], claims: Mapping[str, Any], secret: bytes | None = None) -> str:
    """A compact JWS built by hand: HS256 over `secret` when given, else no signature at all (`alg: none`).

    PyJWT refuses to mint these itself (it will not use a PEM key as an HMAC
    secret), which is exactly why an attacker would build them by hand.
    """
    signing_input = f"{b64url(json.dumps(dict(header)).encode())}.{b64url(json.dumps(dict(claims)).encode())}"
    if secret is None:
        return f"{signing_input}."
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def _handler_for(issuer: Issuer) -> type[BaseHTTPRequestHandler]:
    class JwksHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            issuer.count()
            issuer.wait_if_stalled()
            if self.path != JWKS_PATH:
                self.send_error(404)
                return
            body = json.dumps(issuer.jwks()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a stalled issuer's client gave up (the verifier's fetch timeout): what the test is about

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: pytest shows stderr of failing tests

    return JwksHandler


@contextmanager
def serve_jwks() -> Iterator[Issuer]:
    """An `Issuer` whose JWKS is served at `issuer.url` (`http://127.0.0.1:<port>/jwks.json`) while the block runs."""
    issuer = Issuer()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(issuer))
    server.daemon_threads = True
    issuer.url = f"http://127.0.0.1:{server.server_address[1]}{JWKS_PATH}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="jwks-server", daemon=True)
    thread.start()
    try:
        yield issuer
    finally:
        issuer.release()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def unused_loopback_url() -> str:
    """A JWKS URL on loopback where nothing listens (a JWKS server that is down)."""
    return f"http://127.0.0.1:{free_port()}{JWKS_PATH}"
