"""`astrid mcp serve --http`: one server for many users, each with their own credential.

Auth is on unless the operator says otherwise: static tokens (`astrid mcp
token add NAME`) by default, OIDC/JWT with `--jwks`. `--no-auth` serves
without credentials, as `--principal`, and only on a loopback address: a
server anyone on the network can reach must know who is asking.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from astrid.cli import output
from astrid.cli.connect_hint import http_config_command
from astrid.cli.errors import UserError
from astrid.cli.mcp_cmd import (
    DEV_WATCHING_LINE,
    INTERRUPTED_EXIT,
    RESOURCE_TOOLS_LINE,
    WATCHING_LINE,
    BusOptions,
    ready_lines,
    resolve_principal,
    runtime_config,
    say_not_loaded,
    show_server_events,
)
from astrid.cli.observe import Observability
from astrid.cli.start_up import serving

if TYPE_CHECKING:
    from astrid.host.serving.http import Auth, HttpServing


@dataclass
class HttpOptions:
    address: str
    token_file: Path | None = None
    jwks: str | None = None
    issuer: str | None = None
    audience: str | None = None
    principal_claim: str = "sub"
    no_auth: bool = False
    allowed_origins: list[str] = field(default_factory=list)
    tls_cert: str | None = None
    tls_key: str | None = None
    max_sandboxes: int | None = None
    limits: list[str] = field(default_factory=list)  # --http-limit NAME=VALUE
    resource_tools: bool = False  # also offer the resources as two read-only tools
    bus: BusOptions | None = None  # --bus nats://...: capsules on other hosts too
    access_log: bool = True  # one line per request on stderr (--no-access-log: none)
    client_trace: str = "link"  # a client's traceparent: a link of a new trace (--client-trace)
    workers: int | None = None  # --workers N: N front-end processes on one socket, each running the capsules


def parse_address(address: str) -> tuple[str, int]:
    """`--http [HOST:]PORT` -> (host, port); the host defaults to 127.0.0.1."""
    from astrid.host.addresses import host_and_port

    parsed = host_and_port(address)
    if parsed is None:
        raise UserError(f"--http {address!r}: give [HOST:]PORT with a port of 0-65535, e.g. --http 127.0.0.1:8000")
    return parsed


def _say(message: str) -> None:
    output.say(message)


def _auth(options: HttpOptions, host: str) -> tuple[Auth, str]:
    """How users get in, checked, and the banner's line that says so."""
    from astrid.host.serving.http import NoAuth

    if options.no_auth:
        from astrid.host.addresses import is_loopback

        if options.jwks or options.token_file:
            raise UserError("--no-auth cannot be combined with --tokens or --jwks")
        if not is_loopback(host):
            raise UserError(
                f"--http {host}: refusing to serve without auth on a non-loopback address "
                "(anyone who can reach it would read as --principal); drop --no-auth, or bind 127.0.0.1"
            )
        return NoAuth(), "auth: none (loopback only)"
    if options.jwks:
        return _jwt(options), f"auth: OIDC/JWT from {options.issuer} (principal claim {options.principal_claim!r})"
    if options.issuer or options.audience:
        raise UserError("--issuer and --audience go with --jwks URL")
    return _static_tokens(options)


def _jwt(options: HttpOptions) -> Auth:
    from astrid.host.serving.http import Jwt

    if not options.jwks or not options.issuer or not options.audience:
        raise UserError("--jwks needs --issuer ISS and --audience AUD (what the tokens must carry)")
    if options.token_file:
        raise UserError("--tokens and --jwks are two auth modes: choose one")
    return Jwt(options.jwks, options.issuer, options.audience, options.principal_claim)


def _static_tokens(options: HttpOptions) -> tuple[Auth, str]:
    from astrid.host.auth.tokens import TokenStore
    from astrid.host.serving.http import StaticTokens
    from astrid.host.settings import default_token_file

    path = options.token_file or default_token_file()
    count = len(TokenStore(path).list())
    how = "add one with `astrid mcp token add NAME" + (f" --tokens {path}`" if options.token_file else "`")
    detail = output.counted(count, "token") if count else f"no tokens yet: {how}"
    return StaticTokens(path), f"auth: static tokens from {path} ({detail})"


def _limits_line(listener) -> str:
    limits, cap = listener.settings.limits, listener.guard.max_connections
    per_client = limits.connections_per_client
    line = (
        f"limits: {output.counted(cap, 'connection')} ({per_client or 'no cap'} per client address), "
        f"{output.counted(limits.sessions_per_principal, 'session')} and "
        f"{output.counted(limits.streams_per_principal, 'listen stream')} per user, "
        f"{output.counted(limits.requests_per_principal, 'request')} in flight per user "
        "(--http-limit NAME=VALUE changes them)"
    )
    if cap < limits.connections:
        line += f"; connections capped by the open-file limit ({listener.fd_limit}): raise `ulimit -n` for more"
    return line


def serve_http(
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    watch: bool,
    options: HttpOptions,
    observing: Observability,
    *,
    prepare: Callable[[Any], str] | None = None,
) -> None:
    """`prepare(config)`: a change to the runtime's config (`astrid capsule dev`), returning what the
    banner says of it."""
    from astrid.cli.http_limits import with_overrides
    from astrid.host.limits import HttpLimits
    from astrid.host.serving.http import HttpServeConfig, NoAuth
    from astrid.host.tuning import CLI_TUNING

    host, port = parse_address(options.address)
    limits = with_overrides(HttpLimits(), options.limits)
    if bool(options.tls_cert) != bool(options.tls_key):
        raise UserError("--tls-cert and --tls-key go together")
    auth, auth_line = _auth(options, host)
    one_principal = isinstance(auth, NoAuth)
    if not one_principal and principal is not None:
        raise UserError("--principal applies to stdio and --no-auth: with auth, each credential names its user")
    config = runtime_config(capsule_dirs, principal, options.max_sandboxes, options.bus, one_principal=one_principal)
    mode = f" ({prepare(config)})" if prepare is not None else ""
    http = HttpServeConfig(
        host=host,
        port=port,
        auth=auth,
        allowed_origins=options.allowed_origins,
        tls=(options.tls_cert, options.tls_key) if options.tls_cert and options.tls_key else None,
        limits=limits,
        access_log=options.access_log,
        uvicorn_log_config=not output.json_lines,  # JSON lines: uvicorn's go through astrid's handlers
        resource_tools=options.resource_tools,
        client_trace=options.client_trace,
        worker_threads=CLI_TUNING.http_worker_threads,
    )
    front_end = None
    if options.workers is not None and options.workers > 1:
        front_end = _front_ends(options.workers, host, port, options.address)  # returns in each child only
        http.shared = front_end.shared
        if not front_end.speaks:
            observing.metrics_at = None  # one metrics listener: front end 1's
    speaks = front_end is None or front_end.speaks
    with _listening(config, http, observing, options.address) as served:
        show_server_events()
        started = served.start_telemetry()
        if speaks:
            _banner(served, options, config, observing.lines(started), auth_line, mode)
        on_ready = ready_lines(
            f"connect a client: `{http_config_command(served.url)}` prints an entry",
            DEV_WATCHING_LINE if prepare is not None else WATCHING_LINE,
        )
        if front_end is not None:
            on_ready = _after_all_ready(front_end, on_ready)
        served.start(watch=watch, on_ready=on_ready, on_failed=say_not_loaded)
        serving()
        interrupted = served.run()
    if interrupted and speaks:  # as on stdio: said, and the status of an interrupted command
        if os.isatty(2):  # after the terminal's `^C`
            click.echo("", err=True)
        _say("stopped")
    if interrupted:
        sys.exit(INTERRUPTED_EXIT)


def _banner(served, options: HttpOptions, config, observing_lines: list[str], auth_line: str, mode: str) -> None:
    _say(f"serving MCP resources at {served.url} (streamable HTTP){mode}")
    _say(auth_line)
    _say(_limits_line(served.listener))
    if options.access_log:
        _say("access log: one line per request (time, client, user, method, URI or name, status, ms); --no-access-log")
    _say("capsule paths: " + (", ".join(str(p) for p in config.capsule_paths) or "none"))
    if options.resource_tools:
        _say(RESOURCE_TOOLS_LINE)
    for line in observing_lines:
        _say(line)


def _front_ends(count: int, host: str, port: int, address: str):
    """`--workers N` over HTTP: bind once, fork N front ends; returns in each child its `FrontEnd`.
    This process supervises them and exits with them (host/serving/front_ends.py)."""
    from astrid.host.errors import ServingError
    from astrid.host.serving.front_ends import FrontEnds

    try:
        front_ends = FrontEnds(count, host, port)
    except ServingError as exc:
        raise UserError(f"--http {address}: {exc}") from None
    place = front_ends.fork()
    if place is not None:
        return place
    pids = ", ".join(map(str, front_ends.pids))
    _say(
        f"--workers {count}: {count} front-end processes (pids {pids}) share port {front_ends.port}, "
        "each running every capsule; a 2025-11-25 session stays with the process that opened it"
    )
    try:
        status, interrupted = front_ends.supervise()
    except ServingError as exc:
        raise UserError(f"--workers: {exc}") from None
    sys.exit(INTERRUPTED_EXIT if interrupted else status)


def _after_all_ready(front_end, say_ready: Callable[[Any], None]) -> Callable[[Any], None]:
    """Front end 1 says ready once every front end loaded its capsules; the others only tell it."""

    def on_ready(ready: Any) -> None:
        front_end.ready()
        if front_end.speaks:
            say_ready(ready)

    return on_ready


def _listening(config, http, observing: Observability, address: str) -> HttpServing:
    """The HTTP serving, bound to its address (an address it cannot take is the user's error)."""
    from astrid.host.errors import ServingError
    from astrid.host.serving.http import HttpServing

    try:
        return HttpServing(config, http, observing.telemetry())
    except ServingError as exc:
        raise UserError(f"--http {address}: {exc}") from None


__all__ = ["HttpOptions", "parse_address", "resolve_principal", "serve_http"]
