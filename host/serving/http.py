"""One server for many users over streamable HTTP: auth, the runtime, the server, the listener, telemetry.

with HttpServing(config, http, telemetry) as serving:   # binds the address (ServingError if it cannot)
    started = serving.start_telemetry()
    serving.start(watch=True, on_ready=..., on_failed=...)
    interrupted = serving.run()                         # until Ctrl-C or SIGTERM (uvicorn's shutdown)

The shutdown does not wait for a first compile under way: it is killed at the
signal (and cached only when whole, so the next start compiles again).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from astrid.host.limits import HttpLimits
from astrid.host.mcp.auth import BearerVerifier
from astrid.host.mcp.http import HttpListener, HttpSettings, SharedSocket
from astrid.host.mcp.peer_updates import PeerUpdates
from astrid.host.mcp.server import AstridMcpServer
from astrid.host.runtime import Runtime, RuntimeConfig
from astrid.host.serving.ready import Ready, when_ready
from astrid.host.serving.signals import sigterm_as_ctrl_c
from astrid.host.serving.telemetry import Telemetry, TelemetryStarted


@dataclass(frozen=True)
class NoAuth:
    """No credential asked: every request acts for the runtime's principal (the CLI allows it on loopback only)."""


@dataclass(frozen=True)
class StaticTokens:
    """Bearer tokens from a token file (`astrid mcp token add NAME`), re-read when it changes."""

    path: Path


@dataclass(frozen=True)
class Jwt:
    """OIDC/JWT access tokens, verified against the issuer's JWKS; `claim` names the user."""

    jwks: str
    issuer: str
    audience: str
    claim: str = "sub"


Auth = NoAuth | StaticTokens | Jwt


@dataclass
class HttpServeConfig:
    host: str
    port: int
    auth: Auth
    allowed_origins: list[str] = field(default_factory=list)
    tls: tuple[str, str] | None = None  # (certificate file, key file)
    limits: HttpLimits = field(default_factory=HttpLimits)
    access_log: bool = True  # one line per request on `astrid.access`
    uvicorn_log_config: bool = True  # False: uvicorn's lines go through astrid's handlers (JSON lines)
    resource_tools: bool = False  # also offer the resources as two read-only tools
    client_trace: str = "link"  # a client's traceparent: a link of a new trace
    worker_threads: int | None = None  # requests that may wait on the capsules at once (None: anyio's 40)
    shared: SharedSocket | None = None  # `--workers N`: one of N front ends on a socket bound before (front_ends.py)


def verifier_for(auth: Auth) -> BearerVerifier | None:
    """The bearer verifier for `auth`; None for no auth. AstridError when it cannot be used (a JWKS URL)."""
    if isinstance(auth, NoAuth):
        return None
    if isinstance(auth, Jwt):
        from astrid.host.auth.oidc import JwtVerifier

        return BearerVerifier(JwtVerifier(auth.jwks, auth.issuer, auth.audience, principal_claim=auth.claim))
    from astrid.host.auth.tokens import TokenStore

    return BearerVerifier(TokenStore(auth.path))


class HttpServing:
    def __init__(self, config: RuntimeConfig, http: HttpServeConfig, telemetry: Telemetry | None = None) -> None:
        from astrid.host.errors import ServingError

        settings = HttpSettings(
            host=http.host,
            port=http.port,
            verifier=verifier_for(http.auth),
            issuer=http.auth.issuer if isinstance(http.auth, Jwt) else None,
            allowed_origins=http.allowed_origins,
            tls_cert=http.tls[0] if http.tls else None,
            tls_key=http.tls[1] if http.tls else None,
            limits=http.limits,
            access_log=http.access_log,
            uvicorn_log_config=http.uvicorn_log_config,
            shared=http.shared,
        )
        self.runtime = Runtime(config)
        shared = http.shared
        # --workers: the updates this process's broker checked reach the other front ends' subscribers too
        backend = (
            self.runtime
            if shared is None
            else PeerUpdates(
                self.runtime, own=shared.number, count=shared.count, socket_of=shared.socket_of, tls=bool(http.tls)
            )
        )
        self.server = AstridMcpServer(
            backend,
            limits=self.runtime.limits,
            worker_threads=http.worker_threads,
            resource_tools=http.resource_tools,
            client_trace=http.client_trace,
        )
        try:
            self.listener = HttpListener(self.server, settings)
        except OSError as exc:
            raise ServingError(f"cannot listen there ({exc.strerror or exc})") from None
        self.telemetry = telemetry

    @property
    def url(self) -> str:
        return self.listener.url

    def __enter__(self) -> HttpServing:
        # uvicorn takes SIGTERM while it serves and raises it again once it shut down: with its
        # default action the process would end there, before the spans still queued are flushed
        sigterm_as_ctrl_c()
        return self

    def start_telemetry(self) -> TelemetryStarted | None:
        return self.telemetry.start() if self.telemetry is not None else None

    def start(self, *, watch: bool, on_ready: Callable[[Ready], None], on_failed: Callable[[str], None]) -> None:
        """Load the capsules in the background (requests wait for them); `on_ready` once loaded."""
        self.runtime.start(background=True)
        when_ready(self.runtime, watch=watch, on_ready=on_ready, on_failed=on_failed)

    def run(self) -> bool:
        """Serve until stopped; True when a Ctrl-C (or a SIGTERM made one) stopped it."""
        try:
            # uvicorn stops on the first Ctrl-C, then re-raises it; the load stops at once, so
            # the requests in flight wait on no compile
            self.listener.serve(on_exit=self.runtime.stop_loading)
        except KeyboardInterrupt:
            return True
        return False

    def __exit__(self, *exc: object) -> None:
        try:
            self.listener.close()
            self.runtime.close()
        finally:
            if self.telemetry is not None:
                self.telemetry.close()
