"""Streamable HTTP: one server, many principals, each request authenticated.

    settings = HttpSettings(host="127.0.0.1", port=8000, verifier=BearerVerifier(store))
    listener = HttpListener(server, settings)     # binds the socket: the URL is known
    listener.url                                  # http://127.0.0.1:8000/mcp
    listener.serve()                              # blocks until interrupted

The SDK's `streamable_http_app` serves `/mcp` on uvicorn: handshake-era
(2025-11-25) sessions and 2026-07-28 stateless requests side by side. What
astrid adds:

- every request carries a bearer credential (`verifier`); the SDK answers
  401 with `WWW-Authenticate` without one, and binds each `Mcp-Session-Id` to
  the credential's principal (another principal presenting it gets 404);
- OIDC mode publishes protected-resource metadata naming the issuer, as the
  MCP authorization spec asks; static tokens have no authorization server to
  name, so they publish none;
- DNS-rebinding protection is always on: Host and Origin must be the bound
  address, loopback, or an origin the operator allowed;
- a request body cap, a session cap and an idle timeout for a shared server.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import uvicorn
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

if TYPE_CHECKING:
    from astrid.host.mcp.server import AstridMcpServer

MCP_PATH = "/mcp"
MAX_BODY_BYTES = 1 << 20
MAX_SESSIONS = 256
SESSION_IDLE_TIMEOUT_S = 1800.0
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


@dataclass
class HttpSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    # None: no credential is asked (loopback only); requests act for the default principal.
    verifier: TokenVerifier | None = None
    # OIDC: the authorization server named in the protected-resource metadata.
    issuer: str | None = None
    allowed_origins: list[str] = field(default_factory=list)
    tls_cert: str | None = None
    tls_key: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    max_sessions: int = MAX_SESSIONS
    session_idle_timeout_s: float = SESSION_IDLE_TIMEOUT_S


def is_loopback(host: str) -> bool:
    """Is `host` (a name or an address) this machine only?"""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def transport_security(settings: HttpSettings, port: int) -> TransportSecuritySettings:
    """The Host/Origin allowlist: the bound address, loopback, and the operator's origins."""
    scheme = "https" if settings.tls_cert else "http"
    names = {settings.host if ":" not in settings.host else f"[{settings.host}]", *LOOPBACK_NAMES}
    hosts = {f"{name}:{port}" for name in names} | {f"{name}:*" for name in LOOPBACK_NAMES}
    origins = {f"{scheme}://{name}:{port}" for name in names} | {f"http://{name}:*" for name in LOOPBACK_NAMES}
    for origin in settings.allowed_origins:
        parts = urlsplit(origin)
        origins.add(origin.rstrip("/"))
        if parts.hostname:  # a page served from there talks to us under that name
            hosts.update({parts.netloc, f"{parts.hostname}:*" if parts.port is None else parts.netloc})
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=sorted(hosts), allowed_origins=sorted(origins)
    )


class HttpListener:
    """A bound socket and the app behind it; `serve()` runs uvicorn on them."""

    def __init__(self, server: AstridMcpServer, settings: HttpSettings) -> None:
        self.server = server
        self.settings = settings
        self.socket = _bind(settings.host, settings.port)
        self.port = int(self.socket.getsockname()[1])
        scheme = "https" if settings.tls_cert else "http"
        shown = settings.host if ":" not in settings.host else f"[{settings.host}]"
        self.url = f"{scheme}://{shown}:{self.port}{MCP_PATH}"
        self.app = self._app()

    def _app(self) -> Starlette:
        settings = self.settings
        auth = None
        if settings.verifier is not None:
            # Static tokens name no authorization server: no resource metadata.
            oidc = settings.issuer is not None
            auth = AuthSettings(
                issuer_url=settings.issuer if oidc else self.url,  # type: ignore[arg-type]
                resource_server_url=self.url if oidc else None,  # type: ignore[arg-type]
                validate_token_resource=False,  # the verifier checks the audience itself
            )
        return self.server.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            host=settings.host,
            transport_security=transport_security(settings, self.port),
            auth=auth,
            token_verifier=settings.verifier,
            max_request_body_size=settings.max_body_bytes,
            max_sessions=settings.max_sessions,
            session_idle_timeout=settings.session_idle_timeout_s,
        )

    def serve(self) -> None:
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            lifespan="on",
            ssl_certfile=self.settings.tls_cert,
            ssl_keyfile=self.settings.tls_key,
            timeout_graceful_shutdown=3,
        )
        uvicorn.Server(config).run(sockets=[self.socket])

    def close(self) -> None:
        self.socket.close()


def _bind(host: str, port: int) -> socket.socket:
    """Bind before serving, so the URL (and a port 0 the OS picked) is known up front."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
