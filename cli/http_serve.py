"""`astrid mcp serve --http`: one server for many users, each with their own credential.

Auth is on unless the operator says otherwise: static tokens (`astrid mcp
token add NAME`) by default, OIDC/JWT with `--jwks`. `--no-auth` serves
without credentials, as `--principal`, and only on a loopback address: a
server anyone on the network can reach must know who is asking.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import click

from astrid.cli import output
from astrid.cli.errors import UserError
from astrid.cli.mcp_cmd import (
    INTERRUPTED_EXIT,
    RESOURCE_TOOLS_LINE,
    BusOptions,
    announce,
    make_runtime,
    resolve_capsule_paths,
    resolve_principal,
    show_server_events,
)
from astrid.cli.observe import Observability
from astrid.cli.start_up import serving


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


def parse_address(address: str) -> tuple[str, int]:
    """`[HOST:]PORT` (HOST may be `[v6]`) -> (host, port); the host defaults to 127.0.0.1."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UserError(f"--http {address!r}: give [HOST:]PORT with a port of 0-65535, e.g. --http 127.0.0.1:8000")
    return host, int(port_text)


def _say(message: str) -> None:
    output.say(message)


def _verifier(options: HttpOptions, host: str):
    """The bearer verifier and a line saying how users get in; None for --no-auth."""
    from astrid.host.mcp.http import is_loopback

    if options.no_auth:
        if options.jwks or options.token_file:
            raise UserError("--no-auth cannot be combined with --tokens or --jwks")
        if not is_loopback(host):
            raise UserError(
                f"--http {host}: refusing to serve without auth on a non-loopback address "
                "(anyone who can reach it would read as --principal); drop --no-auth, or bind 127.0.0.1"
            )
        return None, "auth: none (loopback only)"
    from astrid.host.mcp.auth import BearerVerifier

    if options.jwks:
        return _jwt_verifier(
            options
        ), f"auth: OIDC/JWT from {options.issuer} (principal claim {options.principal_claim!r})"
    if options.issuer or options.audience:
        raise UserError("--issuer and --audience go with --jwks URL")
    from astrid.host.auth.tokens import TokenStore
    from astrid.host.settings import default_token_file

    path = options.token_file or default_token_file()
    store = TokenStore(path)
    count = len(store.list())
    how = "add one with `astrid mcp token add NAME" + (f" --tokens {path}`" if options.token_file else "`")
    detail = f"{count} tokens" if count else f"no tokens yet: {how}"
    return BearerVerifier(store), f"auth: static tokens from {path} ({detail})"


def _jwt_verifier(options: HttpOptions):
    from astrid.host.auth.oidc import JwtVerifier
    from astrid.host.errors import AstridError
    from astrid.host.mcp.auth import BearerVerifier

    if not options.jwks or not options.issuer or not options.audience:
        raise UserError("--jwks needs --issuer ISS and --audience AUD (what the tokens must carry)")
    if options.token_file:
        raise UserError("--tokens and --jwks are two auth modes: choose one")
    try:
        source = JwtVerifier(options.jwks, options.issuer, options.audience, principal_claim=options.principal_claim)
    except AstridError as exc:
        raise UserError(str(exc)) from None
    return BearerVerifier(source)


def _limits_line(listener) -> str:
    limits, cap = listener.settings.limits, listener.guard.max_connections
    per_client = limits.connections_per_client
    line = (
        f"limits: {cap} connections ({per_client or 'no cap'} per client address), "
        f"{limits.sessions_per_principal} sessions and {limits.streams_per_principal} listen streams per user, "
        f"{limits.requests_per_principal} requests in flight per user "
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
    observing: Observability | None = None,
) -> None:
    from astrid.cli.http_limits import with_overrides
    from astrid.host.limits import HttpLimits
    from astrid.host.mcp.http import HttpListener, HttpSettings
    from astrid.host.mcp.server import AstridMcpServer
    from astrid.host.runtime import Runtime, RuntimeConfig
    from astrid.host.tuning import CLI_TUNING

    host, port = parse_address(options.address)
    limits = with_overrides(HttpLimits(), options.limits)
    if bool(options.tls_cert) != bool(options.tls_key):
        raise UserError("--tls-cert and --tls-key go together")
    verifier, auth_line = _verifier(options, host)
    if verifier is None:
        runtime = make_runtime(capsule_dirs, principal, options.max_sandboxes, options.bus)
    else:
        if principal is not None:
            raise UserError("--principal applies to stdio and --no-auth: with auth, each credential names its user")
        local = options.bus is None or options.bus.local_capsules
        config = RuntimeConfig(capsule_paths=resolve_capsule_paths(capsule_dirs) if local else [], principal=None)
        if options.max_sandboxes is not None:
            config.max_instances = options.max_sandboxes
        if options.bus is not None:
            options.bus.apply(config)
        runtime = Runtime(config)
    settings = HttpSettings(
        host=host,
        port=port,
        verifier=verifier,
        issuer=options.issuer if options.jwks else None,
        allowed_origins=options.allowed_origins,
        tls_cert=options.tls_cert,
        tls_key=options.tls_key,
        limits=limits,
        access_log=options.access_log,
        uvicorn_log_config=not output.json_lines,  # JSON lines: uvicorn's go through astrid's handlers
    )
    server = AstridMcpServer(
        runtime,
        limits=runtime.limits,
        worker_threads=CLI_TUNING.http_worker_threads,
        resource_tools=options.resource_tools,
        client_trace=options.client_trace,
    )
    try:
        listener = HttpListener(server, settings)
    except OSError as exc:
        raise UserError(f"--http {options.address}: cannot listen there ({exc.strerror or exc})") from None
    show_server_events()
    _say(f"serving MCP resources at {listener.url} (streamable HTTP)")
    _say(auth_line)
    _say(_limits_line(listener))
    if options.access_log:
        _say("access log: one line per request (time, client, user, method, URI or name, status, ms); --no-access-log")
    if options.bus is not None and not options.bus.local_capsules:  # --workers
        _say("capsule paths (the workers'): " + (", ".join(str(p) for p in options.bus.served_paths) or "none"))
    else:
        _say("capsule paths: " + (", ".join(str(p) for p in runtime.config.capsule_paths) or "none"))
    if options.resource_tools:
        _say(RESOURCE_TOOLS_LINE)
    try:
        for line in observing.start() if observing is not None else ():
            _say(line)
    except UserError:
        listener.close()
        raise
    runtime.start(background=True)
    hint = f"connect a client: `astrid mcp config --http {listener.url}` prints an entry"
    announce(runtime, watch, hint)
    interrupted = False
    serving()
    try:
        listener.serve()  # uvicorn stops on the first Ctrl-C, then re-raises it
    except KeyboardInterrupt:
        interrupted = True
    finally:
        listener.close()
        runtime.close()
        if observing is not None:
            observing.close()
    if interrupted:  # as on stdio: said, and the status of an interrupted command
        if os.isatty(2):  # after the terminal's `^C`
            click.echo("", err=True)
        _say("stopped")
        sys.exit(INTERRUPTED_EXIT)


__all__ = ["HttpOptions", "parse_address", "resolve_principal", "serve_http"]
