"""`astrid mcp ...` commands: serve (stdio or HTTP) and config (a client's entry)."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.http_limits import limit_names
from astrid.cli.main import mcp
from astrid.host.settings import PATH_SETTINGS

log = logging.getLogger("astrid.cli")


# -- shared with `astrid resources` ------------------------------------------------------


def capsules_option(function: Callable) -> Callable:
    return click.option(
        "--capsules",
        "capsule_dirs",
        multiple=True,
        type=click.Path(path_type=Path),
        metavar="PATH",
        help="A capsule folder, or a folder of capsule folders (repeatable). "
        "The capsule home is always included when it exists.",
    )(function)


def principal_option(function: Callable) -> Callable:
    return click.option(
        "--principal",
        metavar="NAME",
        default=None,
        help="Serve as this user (default: the OS user running astrid).",
    )(function)


def resolve_principal(principal: str | None) -> str:
    from astrid.host.auth.principal import principal_problem
    from astrid.host.settings import default_principal

    name = principal if principal is not None else default_principal()
    if not name:
        raise UserError("cannot tell which user to serve as: pass --principal NAME")
    problem = principal_problem(name)
    if problem:
        raise UserError(f"--principal {name!r}: {problem}")
    return name


def resolve_capsule_paths(capsule_dirs: tuple[Path, ...]) -> list[Path]:
    from astrid.host.settings import capsule_paths

    for path in capsule_dirs:
        if not path.expanduser().exists():
            raise UserError(
                f"--capsules {path}: no such folder (give a capsule folder or a folder of capsules; "
                "create one with `astrid capsule new NAME`)"
            )
    return capsule_paths(capsule_dirs)


def make_runtime(
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    max_sandboxes: int | None = None,
    bus: BusOptions | None = None,
):
    from astrid.host.runtime import Runtime, RuntimeConfig

    config = RuntimeConfig(capsule_paths=resolve_capsule_paths(capsule_dirs), principal=resolve_principal(principal))
    if max_sandboxes is not None:
        config.max_instances = max_sandboxes
    if bus is not None:
        bus.apply(config)
    return Runtime(config)


class BusOptions:
    """`--bus nats://...` and `--nats-creds FILE`: join capsule hosts over NATS (docs/nats.md)."""

    def __init__(self, url: str | None, credentials: Path | None) -> None:
        from astrid.host.bus.nats import nats_problem

        if url is None and credentials is not None:
            raise UserError("--nats-creds goes with --bus nats://HOST:PORT")
        problem = nats_problem(url) if url is not None else None
        if problem:
            raise UserError(f"--bus {problem}")
        self.url = url
        self.credentials = str(credentials) if credentials is not None else None

    def apply(self, config) -> None:
        config.bus_url = self.url
        config.nats_credentials = self.credentials


def bus_options(function):
    function = click.option(
        "--nats-creds",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="A NATS credentials (.creds) file for --bus.",
    )(function)
    return click.option(
        "--bus",
        "bus_url",
        default=None,
        metavar="nats://HOST:PORT",
        help="Join capsule hosts over this NATS server (user:password@ or a token in the URL, or --nats-creds).",
    )(function)


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


# -- serve -----------------------------------------------------------------------------


@mcp.command("serve")
@capsules_option
@principal_option
@click.option("--watch/--no-watch", default=True, show_default=True, help="Reload capsules when their folders change.")
@click.option(
    "--http",
    "http_address",
    metavar="[HOST:]PORT",
    default=None,
    help="Serve streamable HTTP at /mcp instead of stdio (HOST defaults to 127.0.0.1; PORT 0 picks a free one).",
)
@click.option(
    "--tokens",
    "token_file",
    type=click.Path(path_type=Path),
    default=None,
    metavar="FILE",
    help="HTTP: the static-token file (default: the user config dir; see `astrid mcp token`).",
)
@click.option("--jwks", metavar="URL", default=None, help="HTTP: verify OIDC/JWT access tokens against this JWKS.")
@click.option("--issuer", metavar="ISS", default=None, help="HTTP with --jwks: the tokens' required issuer.")
@click.option("--audience", metavar="AUD", default=None, help="HTTP with --jwks: the tokens' required audience.")
@click.option(
    "--principal-claim", metavar="CLAIM", default="sub", show_default=True, help="HTTP with --jwks: the user claim."
)
@click.option(
    "--no-auth",
    is_flag=True,
    help="HTTP on loopback only: no credential; every request acts for --principal.",
)
@click.option("--allowed-origin", "allowed_origins", multiple=True, metavar="ORIGIN", help="HTTP: allow this Origin.")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None, help="HTTP: TLS certificate.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None, help="HTTP: TLS key.")
@click.option(
    "--max-sandboxes",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="HTTP: live sandboxes (one per capsule and user) before the least recently used idle one "
    "is closed [default: 256].",
)
@click.option(
    "--http-limit",
    "http_limits",
    multiple=True,
    metavar="NAME=VALUE",
    help="HTTP: change a front-door limit (repeatable). NAME=default: " + limit_names() + ". Seconds for "
    "timeouts; connections-per-client=0 behind a reverse proxy. docs/security.md says when to change them.",
)
@click.option(
    "--resource-tools",
    is_flag=True,
    help="Also offer the resources as two read-only tools (list_resources, read_resource), "
    "so the client's model can fetch context itself.",
)
@bus_options
def mcp_serve(
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    watch: bool,
    http_address: str | None,
    token_file: Path | None,
    jwks: str | None,
    issuer: str | None,
    audience: str | None,
    principal_claim: str,
    no_auth: bool,
    allowed_origins: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    resource_tools: bool,
    max_sandboxes: int | None,
    http_limits: tuple[str, ...],
    bus_url: str | None,
    nats_creds: Path | None,
) -> None:
    """Serve capsule resources to MCP clients: over stdio (one user), or over HTTP (many).

    On stdio, stdout carries only JSON-RPC; everything else goes to stderr.
    The server answers `initialize` at once; capsules load in the background
    and requests wait for them.
    """
    bus = BusOptions(bus_url, nats_creds)
    if http_address is None:
        http_only = {
            "--tokens": token_file,
            "--jwks": jwks,
            "--no-auth": no_auth,
            "--tls-cert": tls_cert,
            "--max-sandboxes": max_sandboxes,
            "--http-limit": http_limits,
        }
        given = [name for name, value in http_only.items() if value]
        if given:
            raise UserError(f"{', '.join(given)}: HTTP options, give them with --http [HOST:]PORT")
        _serve_stdio(capsule_dirs, principal, watch, resource_tools, bus)
        return
    from astrid.cli.http_serve import HttpOptions, serve_http

    options = HttpOptions(
        address=http_address,
        token_file=token_file,
        jwks=jwks,
        issuer=issuer,
        audience=audience,
        principal_claim=principal_claim,
        no_auth=no_auth,
        allowed_origins=list(allowed_origins),
        tls_cert=tls_cert,
        tls_key=tls_key,
        resource_tools=resource_tools,
        max_sandboxes=max_sandboxes,
        limits=list(http_limits),
        bus=bus,
    )
    serve_http(capsule_dirs, principal, watch, options)


def _serve_stdio(
    capsule_dirs: tuple[Path, ...], principal: str | None, watch: bool, resource_tools: bool, bus: BusOptions
) -> None:
    import anyio

    from astrid.host.mcp.server import AstridMcpServer
    from astrid.host.settings import default_capsule_home

    runtime = make_runtime(capsule_dirs, principal, bus=bus)
    if bus.url is not None:
        _say(f"joining the capsule hosts on {bus.url.split('@')[-1]} (NATS)")
    paths = runtime.config.capsule_paths
    _say(f"serving MCP resources on stdio for principal {runtime.principal!r}")
    if paths:
        _say("capsule paths: " + ", ".join(str(p) for p in paths))
    else:
        _say(f"no capsules: put some in {default_capsule_home()} or pass --capsules PATH")
    if resource_tools:
        _say(RESOURCE_TOOLS_LINE)
    runtime.start(background=True)
    hint = "connect a client: `astrid mcp config` prints a Claude Desktop entry"
    announce(runtime, watch, hint)
    server = AstridMcpServer(runtime, limits=runtime.limits, resource_tools=resource_tools)
    try:
        anyio.run(server.run_stdio)
    except KeyboardInterrupt:
        pass
    finally:
        runtime.close()


RESOURCE_TOOLS_LINE = "also offering the resources as tools: list_resources, read_resource (--resource-tools)"


def announce(runtime, watch: bool, hint: str) -> None:
    """Once loaded (in the background): what is served, and how to connect (stderr)."""
    threading.Thread(target=_announce, args=(runtime, watch, hint), name="astrid-announce", daemon=True).start()


def _announce(runtime, watch: bool, hint: str) -> None:
    from astrid.host.errors import BackendNotReady

    try:
        runtime.wait_ready(3600)
    except BackendNotReady as exc:
        _say(f"capsules could not be loaded: {exc}")
        return
    status = runtime.status
    for failure in status.failures:
        _say(f"capsule {failure.folder} not loaded: {failure.error}")
    names = ", ".join(c.name for c in status.capsules) or "none"
    ready = f"ready in {status.seconds:.1f} s: {len(status.capsules)} capsules ({names})"
    if runtime.principal is not None:
        try:
            count = str(len(runtime.list_resources()))
        except Exception as exc:  # the banner must not take the server down
            count = f"unknown ({exc})"
        ready += f", {count} resources for principal {runtime.principal!r}"
    if runtime.closed:  # the client left while we were loading
        return
    _say(ready)
    for capsule in status.capsules:
        _say("  " + capsule.identity_line())
    _say(hint)
    runtime.watch_mounts()  # live data: always on; it polls only folders granted as fs mounts
    if watch and runtime.config.capsule_paths:
        runtime.watch_folders()
        _say("watching the capsule folders; a rebuilt capsule is reloaded")


# -- config ----------------------------------------------------------------------------

CONFIG_LOCATIONS = (
    ("macOS", "~/Library/Application Support/Claude/claude_desktop_config.json"),
    ("Windows", r"%APPDATA%\Claude\claude_desktop_config.json"),
    ("Linux", "~/.config/Claude/claude_desktop_config.json  ($XDG_CONFIG_HOME/Claude/)"),
)


def astrid_command() -> list[str]:
    """An absolute command that starts this astrid, whatever the client's cwd and PATH."""
    candidate = Path(sys.executable).parent / ("astrid.exe" if os.name == "nt" else "astrid")
    if candidate.is_file():
        return [str(candidate)]
    return [str(Path(sys.executable).resolve()), "-m", "astrid.cli.main"]


def config_entry(name: str, capsule_dirs: list[Path], principal: str | None, resource_tools: bool = False) -> dict:
    command, *prefix = astrid_command()
    args = [*prefix, "mcp", "serve"]
    for path in capsule_dirs:
        args += ["--capsules", str(path)]
    if principal:
        args += ["--principal", principal]
    if resource_tools:
        args.append("--resource-tools")
    # Clients start servers with a minimal environment: pass astrid's own settings on.
    env = {key: os.environ[key] for key in PATH_SETTINGS if os.environ.get(key)}
    return {"mcpServers": {name: {"command": command, "args": args, "env": env}}}


def http_config_entry(name: str, url: str) -> dict:
    """A client entry for a remote `astrid mcp serve --http` (the token stays a placeholder)."""
    return {"mcpServers": {name: {"type": "http", "url": url, "headers": {"Authorization": "Bearer <token>"}}}}


@mcp.command("config")
@click.option("--name", default="astrid", show_default=True, help="The server's name in the client's config.")
@click.option("--http", "http_url", metavar="URL", default=None, help="An entry for a remote server at this URL.")
@capsules_option
@principal_option
@click.option(
    "--resource-tools",
    is_flag=True,
    help="The entry starts the server with --resource-tools (the resources also as two read-only tools).",
)
def mcp_config(
    name: str, http_url: str | None, capsule_dirs: tuple[Path, ...], principal: str | None, resource_tools: bool
) -> None:
    """Print a client entry: for `astrid mcp serve` on stdio, or with --http URL for a remote server.

    The JSON goes to stdout (merge its `mcpServers` entry into the client's
    config); where the file lives goes to stderr.
    """
    if http_url is not None:
        if resource_tools:
            raise UserError(
                "--resource-tools belongs to the server: start it with `astrid mcp serve --http ... --resource-tools`; "
                "the client's entry is the same either way"
            )
        _http_config(name, http_url, capsule_dirs, principal)
        return
    for path in capsule_dirs:
        if not path.expanduser().exists():
            raise UserError(f"--capsules {path}: no such folder")
    if principal is not None:
        resolve_principal(principal)
    paths = [path.expanduser().resolve() for path in capsule_dirs]
    click.echo(json.dumps(config_entry(name, paths, principal, resource_tools), indent=2))
    click.echo("", err=True)
    click.echo("Merge the entry above into `mcpServers` of claude_desktop_config.json, then restart the app:", err=True)
    for system, location in CONFIG_LOCATIONS:
        click.echo(f"  {system + ':':9} {location}", err=True)
    click.echo(
        "The capsule home (always served when it exists) is "
        f"{_home()}; the server runs as the OS user unless --principal is given.",
        err=True,
    )


def _http_config(name: str, url: str, capsule_dirs: tuple[Path, ...], principal: str | None) -> None:
    from urllib.parse import urlsplit

    if capsule_dirs or principal:
        raise UserError("--capsules and --principal belong to the server: pass them to `astrid mcp serve --http`")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"--http {url!r}: give the server's URL, e.g. https://mcp.example.com/mcp")
    click.echo(json.dumps(http_config_entry(name, url), indent=2))
    click.echo("", err=True)
    click.echo("Replace <token> with the token `astrid mcp token add NAME` printed on the server.", err=True)
    click.echo(
        "Clients that take remote servers in their config file (`type: http`, `url`, `headers`) use it as is; "
        "in Claude Desktop, add the URL under Settings > Connectors.",
        err=True,
    )


def _home() -> Path:
    from astrid.host.settings import default_capsule_home

    return default_capsule_home()
