"""Streamable HTTP: one server, many principals, each request authenticated.

    settings = HttpSettings(host="127.0.0.1", port=8000, verifier=BearerVerifier(store))
    listener = HttpListener(server, settings)     # binds the socket: the URL is known
    listener.url                                  # http://127.0.0.1:8000/mcp
    listener.serve(on_exit=runtime.stop_loading)  # until interrupted; on_exit at the first signal

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
- a request body cap; connection caps and deadlines (`connections.py`);
  sessions capped per principal (`sessions.py`); sessions and streams that
  end with their credential (`credential_watch.py`): the limits of
  `http_limits.py`, for a shared server;
- an access log, one line per request (`access_log`, on by default), and a
  rate-limited line per refused credential (`access.py`).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import uvicorn
from mcp.server.auth.provider import TokenVerifier
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.types import ASGIApp

from astrid.host.limits import HttpLimits
from astrid.host.mcp.access import AccessLog, FailureLog
from astrid.host.mcp.connections import ConnectionGuard, GuardedServer, connection_cap, guarded_protocol, raise_fd_limit
from astrid.host.mcp.credential_watch import CredentialWatch
from astrid.host.mcp.peer_updates import PeerEndpoint, PeerUpdates
from astrid.host.mcp.sdk_internals import streamable_http_app
from astrid.host.mcp.session_owner import AnsweredBy, OwnerRouter, id_prefix
from astrid.host.mcp.sessions import PrincipalSessionManager

if TYPE_CHECKING:
    from astrid.host.mcp.server import AstridMcpServer

MCP_PATH = "/mcp"
MAX_BODY_BYTES = 1 << 20
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
    limits: HttpLimits = field(default_factory=HttpLimits)
    # One line per request on the `astrid.access` logger (`--no-access-log` turns it off).
    access_log: bool = True
    # False: uvicorn installs no log handlers of its own, so its lines go through the
    # root logger's (`--log-format json`).
    uvicorn_log_config: bool = True
    # `--workers N`: this process is one of N sharing a socket bound before they started.
    shared: SharedSocket | None = None


@dataclass(frozen=True)
class SharedSocket:
    """Front end `number` of `count` accepting on one address: `socket` was bound before the fork (its
    own SO_REUSEPORT socket, or one shared by all); it also listens on `socket_of(number)`, where the
    others forward its sessions' requests (`session_owner.py`) and pass resource updates (`peer_updates.py`)."""

    socket: socket.socket
    number: int
    count: int
    folder: Path  # 0700: the processes' unix sockets

    def socket_of(self, number: int) -> Path:
        return self.folder / f"{number}.sock"


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
    """A bound socket and the app behind it; `serve()` runs uvicorn on them under the limits."""

    def __init__(self, server: AstridMcpServer, settings: HttpSettings) -> None:
        self.server = server
        self.settings = settings
        shared = settings.shared
        self.socket = shared.socket if shared is not None else bind_address(settings.host, settings.port)
        self.peer_socket = _bind_unix(shared.socket_of(shared.number)) if shared is not None else None
        self.port = int(self.socket.getsockname()[1])
        scheme = "https" if settings.tls_cert else "http"
        shown = settings.host if ":" not in settings.host else f"[{settings.host}]"
        self.url = f"{scheme}://{shown}:{self.port}{MCP_PATH}"
        limits = settings.limits
        self.fd_limit = raise_fd_limit()
        self.guard = ConnectionGuard(limits)
        self.guard.max_connections = connection_cap(limits, self.fd_limit)
        verifier = settings.verifier
        self.credentials = (
            CredentialWatch(verifier, every_s=limits.credential_check_s) if verifier is not None else None
        )
        server.credentials = self.credentials
        server.max_streams_per_principal = limits.streams_per_principal
        server.max_requests_per_principal = limits.requests_per_principal
        self.sessions = PrincipalSessionManager(
            app=server.server,
            security_settings=transport_security(settings, self.port),
            max_request_body_size=settings.max_body_bytes,
            session_idle_timeout=limits.session_idle_s,
            max_sessions=limits.sessions,
            sessions_per_principal=limits.sessions_per_principal,
            watch=self.credentials,
            id_prefix=id_prefix(shared.number) if shared is not None else "",
        )
        self.app: ASGIApp = self._app()
        if settings.access_log or verifier is not None:  # failed logins are logged with or without the access log
            self.app = AccessLog(
                self.app,
                access=settings.access_log,
                principal=server.backend.principal if verifier is None else None,
                failures=FailureLog() if verifier is not None else None,
            )
        if shared is not None:  # outermost: a forwarded request is logged (and authenticated) by its owner
            inner: ASGIApp = AnsweredBy(self.app, shared.number)
            if isinstance(server.backend, PeerUpdates):
                inner = PeerEndpoint(inner, server.backend)
            self.app = OwnerRouter(
                inner,
                own=shared.number,
                count=shared.count,
                socket_of=shared.socket_of,
                path=MCP_PATH,
                max_body=settings.max_body_bytes,
                tls=bool(settings.tls_cert),
            )

    def _app(self) -> Starlette:
        """The SDK's parts, composed as its `streamable_http_app` does, around astrid's session manager."""
        settings = self.settings
        return streamable_http_app(
            self.sessions, path=MCP_PATH, verifier=settings.verifier, resource_url=self.url, issuer=settings.issuer
        )

    def serve(self, on_exit: Callable[[], None]) -> None:
        """Until Ctrl-C or SIGTERM; `on_exit` runs on the first one, in the signal handler."""
        logging: dict[str, Any] = {} if self.settings.uvicorn_log_config else {"log_config": None}
        config = uvicorn.Config(
            self.app,
            **logging,
            http=guarded_protocol(self.guard),
            log_level="warning",
            lifespan="on",
            ssl_certfile=self.settings.tls_cert,
            ssl_keyfile=self.settings.tls_key,
            timeout_keep_alive=max(1, round(self.settings.limits.keep_alive_s)),
            timeout_graceful_shutdown=3,
        )
        sockets = [self.socket] if self.peer_socket is None else [self.socket, self.peer_socket]
        GuardedServer(config, self.guard, on_exit).run(sockets=sockets)

    def close(self) -> None:
        self.socket.close()
        if self.peer_socket is not None and self.settings.shared is not None:
            self.peer_socket.close()
            self.settings.shared.socket_of(self.settings.shared.number).unlink(missing_ok=True)


def bind_address(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """Bind before serving, so the URL (and a port 0 the OS picked) is known up front. `reuse_port`:
    one of several sockets on the same port, among which the kernel spreads new connections."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _bind_unix(path: Path) -> socket.socket:
    """The socket where the other front-end processes forward this one's sessions (in a 0700 folder)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    return sock
