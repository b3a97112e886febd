"""`astrid mcp ...` commands: serve (stdio or HTTP) and config (a client's entry)."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from astrid.cli import output
from astrid.cli.client_install import (
    CLIENTS,
    Client,
    astrid_command,
    check_name,
    check_url,
    default_name,
    dev_entry,
    http_entry,
    install_entry,
    server_entry,
)
from astrid.cli.config_file import (
    HTTP_ONLY,
    KEYS,
    ConfigFileCommand,
    explicit_config_file,
    from_command_line,
    from_file,
    load_config,
    serving_config,
)
from astrid.cli.connect_hint import config_command
from astrid.cli.errors import UserError
from astrid.cli.http_limits import limit_names
from astrid.cli.main import mcp
from astrid.cli.observe import Observability, client_trace_for, client_trace_option, observability_options
from astrid.cli.start_up import quiet_start_up, serving
from astrid.cli.workers import WorkersType
from astrid.host.serving.signals import INTERRUPTED_EXIT

if TYPE_CHECKING:
    from astrid.host.runtime import RuntimeConfig
    from astrid.host.serving.ready import Ready

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


WATCHING_LINE = "watching the capsule folders; a rebuilt capsule is reloaded"  # serve's and host run's
# `astrid capsule dev`'s
DEV_WATCHING_LINE = (
    "dev mode: watching the folder; a saved edit of its .py files, requirements.txt or Capsule.toml is served "
    "at once, no build (a version that fails is shown here and the last good one keeps serving)"
)


def watch_option(function: Callable) -> Callable:
    return click.option(
        "--watch/--no-watch", default=True, show_default=True, help="Reload capsules when their folders change."
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


MANIFEST = "Capsule.toml"  # astrid.host.capsule.manifest.MANIFEST_NAME, without importing pydantic here


def resolve_capsule_paths(capsule_dirs: tuple[Path, ...]) -> list[Path]:
    """The capsule home and the --capsules paths, checked: a missing path or another file is an
    error, a Capsule.toml stands for its folder, a folder with no capsule in it is warned about."""
    from astrid.host.settings import capsule_paths

    folders: list[Path] = []
    for path in capsule_dirs:
        full = path.expanduser()
        if not full.exists():
            raise UserError(
                f"--capsules {path}: no such folder (give a capsule folder or a folder of capsules; "
                "create one with `astrid capsule new NAME`)"
            )
        if full.is_file() and full.name == MANIFEST:
            _say(f"--capsules {path}: serving the capsule folder it is in, {full.parent}")
            full = full.parent
        elif not full.is_dir():
            hint = f"; install an artifact with `astrid capsule install {path}`" if full.suffix == ".capsule" else ""
            raise UserError(
                f"--capsules {path}: a file, not a folder: give the capsule's folder (the one with {MANIFEST}) "
                f"or a folder of capsule folders{hint}"
            )
        elif not _holds_capsules(full):
            _say(
                f"warning: --capsules {path}: no capsule there (no {MANIFEST} in it nor in its subfolders), "
                f"so nothing is served from it; create one with `astrid capsule new NAME --dir {path}`"
            )
        folders.append(full)
    return capsule_paths(folders)


def _holds_capsules(folder: Path) -> bool:
    """A capsule folder, or a folder with one capsule folder at least (as the kernel discovers them)."""
    if (folder / MANIFEST).is_file():
        return True
    try:
        return any((child / MANIFEST).is_file() for child in folder.iterdir())
    except OSError:
        return True  # unreadable: the kernel says what it can


def runtime_config(
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    max_sandboxes: int | None = None,
    bus: BusOptions | None = None,
    *,
    one_principal: bool = True,
):
    """The runtime's config from the options; `one_principal` False: each credential names its user."""
    from astrid.host.runtime import RuntimeConfig

    local = bus is None or bus.local_capsules
    paths = resolve_capsule_paths(capsule_dirs) if local else []
    config = RuntimeConfig(capsule_paths=paths, principal=resolve_principal(principal) if one_principal else None)
    if max_sandboxes is not None:
        config.max_instances = max_sandboxes
    if bus is not None:
        bus.apply(config)
    return config


def make_runtime(capsule_dirs: tuple[Path, ...], principal: str | None):
    """A runtime serving the options' capsules to one principal (`astrid resources`)."""
    from astrid.host.runtime import Runtime

    return Runtime(runtime_config(capsule_dirs, principal))


class BusOptions:
    """`--bus nats://...` and `--nats-creds FILE`: join capsule hosts over NATS (docs/nats.md)."""

    def __init__(self, url: str | None, credentials: Path | None) -> None:
        if url is None and credentials is not None:
            raise UserError("--nats-creds goes with --bus nats://HOST:PORT")
        if url is not None:
            from astrid.host.bus.nats import nats_problem  # here: without --bus, the NATS bus is never loaded

            if problem := nats_problem(url):
                raise UserError(f"--bus {problem}")
        self.url = url
        self.credentials = str(credentials) if credentials is not None else None
        self.kv_on_bus = True  # kv state in JetStream (False: the SQLite file, as on one machine)
        self.local_capsules = True  # False: this process runs no capsules (`--workers` runs them)
        self.before_join: Callable[[], bool] | None = None
        self.stop_joining: Callable[[], None] | None = None  # ends a before_join wait at once
        self.served_paths: list[Path] = []  # with local_capsules False: the capsule paths the workers run

    def apply(self, config) -> None:
        config.bus_url = self.url
        config.nats_credentials = self.credentials
        config.kv_on_bus = self.kv_on_bus
        config.before_join = self.before_join
        config.stop_joining = self.stop_joining
        if not self.local_capsules:
            config.capsule_paths = []


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
        envvar="ASTRID_BUS",  # keeps a password off the command line, which every local user can read (`ps`)
        metavar="nats://HOST:PORT",
        help="Join capsule hosts over this NATS server (user:password@ or a token in the URL, or --nats-creds); "
        "default: $ASTRID_BUS.",
    )(function)


def _say(message: str) -> None:
    output.say(message)


# -- serve -----------------------------------------------------------------------------


@mcp.command("serve", cls=ConfigFileCommand)
@capsules_option
@principal_option
@watch_option
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
    "--no-auth/--auth",
    "no_auth",
    default=False,
    help="HTTP on loopback only: no credential; every request acts for --principal (--auth: undo the config file's).",
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
    "--resource-tools/--no-resource-tools",
    default=False,
    help="Also offer the resources as two read-only tools (list_resources, read_resource), "
    "so the client's model can fetch context itself.",
)
@click.option(
    "--access-log/--no-access-log",
    default=True,
    help="HTTP: one line per request on stderr (time, client address, user, method, URI or name, status, ms) "
    "[default: on].",
)
@bus_options
@observability_options
@client_trace_option
@click.option(
    "--workers",
    type=WorkersType(),
    default=None,
    help="Use N local processes (auto: one per core). HTTP: N servers accepting on one address, each running "
    "the capsules; stdio: the capsules in N processes behind a private nats-server this command starts and "
    "stops (docs/nats.md).",
)
@quiet_start_up
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
    access_log: bool,
    bus_url: str | None,
    nats_creds: Path | None,
    otel: bool,
    metrics_address: str | None,
    metrics_public: bool,
    log_format: str,
    client_trace: str | None,
    workers: int | None,
) -> None:
    """Serve capsule resources to MCP clients: over stdio (one user), or over HTTP (many).

    On stdio, stdout carries only JSON-RPC; everything else goes to stderr.
    The server answers `initialize` at once; capsules load in the background
    and requests wait for them. Traces (OTEL_* or --otel; --client-trace), metrics
    (--metrics) and JSON log lines (--log-format json): docs/operations.md.
    """
    observing = Observability(otel, metrics_address, metrics_public, log_format, service="astrid")
    # HTTP serves others: their traceparent is a link (the operator's sampler decides), not a parent
    trace_mode = observing.client_trace = client_trace_for(client_trace, http=http_address is not None)
    config = serving_config()  # astrid.toml: its values are the defaults of the options above
    if config is not None:
        _say(f"settings from {config.path} ({config.found}; flags override it)")
        if config.values.get("http_limits") and from_command_line("http_limits"):
            http_limits = (*config.values["http_limits"], *http_limits)  # a flag overrides that one limit
    bus = BusOptions(bus_url, nats_creds)
    if workers is not None and bus.url is not None:
        raise UserError("--workers runs the capsules on this machine: give --workers or --bus, not both")
    if http_address is None:
        http_only = {
            "--tokens": ("token_file", token_file),
            "--jwks": ("jwks", jwks),
            "--no-auth": ("no_auth", no_auth),
            "--tls-cert": ("tls_cert", tls_cert),
            "--max-sandboxes": ("max_sandboxes", max_sandboxes),
            "--http-limit": ("http_limits", http_limits),
            "--no-access-log": ("access_log", not access_log),
        }
        given = [name for name, (param, value) in http_only.items() if value and not from_file(param)]
        if given:
            raise UserError(f"{', '.join(given)}: HTTP options, give them with --http [HOST:]PORT")
        unused = [k for k in HTTP_ONLY if config and config.values.get(KEYS[k].param) and from_file(KEYS[k].param)]
        if unused and config is not None:
            _say(f"{config.path}: {', '.join(unused)}: used with --http only (this serves stdio)")
        with _local_workers(workers, capsule_dirs, bus, watch) as joined:
            _serve_stdio(capsule_dirs, principal, watch, resource_tools, joined, observing, trace_mode)
        return
    if config is not None and principal is not None and not no_auth and from_file("principal"):
        _say(f"{config.path}: principal: used on stdio and with no-auth only (with auth, a credential names its user)")
        principal = None
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
        access_log=access_log,
        client_trace=trace_mode,
    )
    options.workers = workers  # HTTP: N front ends on one socket, each running the capsules (no NATS)
    serve_http(capsule_dirs, principal, watch, options, observing)


@contextmanager
def _local_workers(
    count: int | None, capsule_dirs: tuple[Path, ...], bus: BusOptions, watch: bool
) -> Iterator[BusOptions]:
    """With --workers: a private nats-server and `count` capsule hosts for as long as serve runs
    (each reloads its capsules when their folders change, unless `watch` is off)."""
    if count is None:
        yield bus
        return
    from astrid.host.errors import ServingError
    from astrid.host.serving.workers import LocalCluster

    paths = resolve_capsule_paths(capsule_dirs)  # a wrong --capsules is an error before anything starts
    try:
        cluster = LocalCluster(count, capsule_dirs, relay=_worker_line, watch=watch)
        cluster.start()
    except ServingError as exc:
        raise UserError(f"--workers: {exc}") from None
    try:
        _say(_workers_line(cluster))
        joined = BusOptions(cluster.url("mcp"), None)
        joined.local_capsules = False  # the workers run them
        joined.before_join = cluster.wait_ready
        joined.stop_joining = cluster.stop_waiting  # a stop does not wait for the workers' first compile
        joined.served_paths = paths
        yield joined
    finally:
        cluster.stop()


def _worker_line(number: int, line: str) -> None:
    click.echo(f"astrid: worker {number}: {line}", err=True)


def _workers_line(cluster) -> str:
    count = cluster.count
    pids = ", ".join(str(p.pid) for p in cluster.workers)
    nats_pid = cluster.nats.pid if cluster.nats is not None else "?"
    return (
        f"--workers {count}: started nats-server (pid {nats_pid}) on {cluster.address}, loopback only, "
        f"generated credentials; and {output.counted(count, 'capsule host')} "
        f"(`astrid host run`, pids {pids}), each running every capsule (replicas)"
    )


def _serve_stdio(
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    watch: bool,
    resource_tools: bool,
    bus: BusOptions,
    observing: Observability,
    client_trace: str = "parent",
    *,
    prepare: Callable[[RuntimeConfig], str] | None = None,
    entry_command: str | None = None,
) -> None:
    """`prepare(config)`: a change to the runtime's config (`astrid capsule dev`), returning what the
    banner says of it; `entry_command`: the command that prints this server's client entry, when
    `astrid mcp config` with its options is not it."""
    from astrid.host.serving.stdio import StdioServing
    from astrid.host.settings import default_capsule_home

    config = runtime_config(capsule_dirs, principal, bus=bus)
    mode = f" ({prepare(config)})" if prepare is not None else ""
    with StdioServing(
        config,
        resource_tools=resource_tools,
        client_trace=client_trace,
        on_stopping=_stopping,
        telemetry=observing.telemetry(),
        sigterm_stops=not bus.local_capsules,  # --workers: SIGTERM stops as Ctrl-C does, so the workers are stopped too
    ) as served:
        show_server_events()
        if bus.url is not None:
            _say(f"joining the capsule hosts on {bus.url.split('@')[-1]} (NATS)")
        paths = config.capsule_paths if bus.local_capsules else bus.served_paths
        _say(f"serving MCP resources on stdio for principal {config.principal!r}{mode}")
        terminal = _stdin_is_terminal()
        if terminal:  # a person, not a client, is on stdin
            _say(WAITING_LINE)
        if paths:
            _say(
                ("capsule paths: " if bus.local_capsules else "capsule paths (the workers'): ")
                + ", ".join(map(str, paths))
            )
        else:
            _say(f"no capsules: put some in {default_capsule_home()} or pass --capsules PATH")
        if resource_tools:
            _say(RESOURCE_TOOLS_LINE)
        for line in observing.lines(served.start_telemetry()):
            _say(line)
        entry = entry_command or config_command(capsule_dirs, principal, resource_tools)
        hint = f"connect a client: `{entry}` prints a Claude Desktop entry for this server"
        if terminal:
            hint += " (the client starts its own server); this one is " + WAITING_LINE
        watching = DEV_WATCHING_LINE if prepare is not None else WATCHING_LINE
        served.start(watch=watch, on_ready=ready_lines(hint, watching), on_failed=say_not_loaded)
        serving()
        stopped = served.run()
    if not stopped and not terminal and served.server.messages_read == 0:  # e.g. `make serve </dev/null`
        _say(
            f"stdin ended before any request: an MCP client starts this server and talks on its stdin; `{entry}` "
            "prints the client's entry"
        )
    if stopped:
        _say("stopped")
        sys.exit(INTERRUPTED_EXIT)


WAITING_LINE = "waiting for an MCP client on stdin (Ctrl-C to stop)"


def _stdin_is_terminal() -> bool:
    try:
        return os.isatty(0)
    except OSError:
        return False


def _stopping(pending: int) -> None:
    """Said on the first Ctrl-C, once the input has ended."""
    if os.isatty(2):  # after the terminal's `^C`
        click.echo("", err=True)
    if pending:
        waiting = output.counted(pending, "request")
        _say(f"Ctrl-C: answering the {waiting} already read, then stopping (Ctrl-C again to stop at once)")
    else:
        _say("Ctrl-C: stopping")


def show_server_events() -> None:
    """Show what a running server reports, as `astrid: ...` lines on stderr at the default level:
    reloads, grant and mount changes, missing granted folders, failed HTTP logins (`astrid.events`)
    and the HTTP access log (`astrid.access`, when it is on)."""
    for name in ("astrid.events", "astrid.access"):
        logger = logging.getLogger(name)
        if any(getattr(h, "astrid_events", False) for h in logger.handlers):
            continue
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(output.formatter("astrid: %(message)s"))
        handler.astrid_events = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # once, also with -v


RESOURCE_TOOLS_LINE = "also offering the resources as tools: list_resources, read_resource (--resource-tools)"


def ready_lines(hint: str, watching_line: str = WATCHING_LINE) -> Callable[[Ready], None]:
    """What a server says once its capsules are loaded: what it serves, and how to connect (stderr)."""

    def say_ready(ready: Ready) -> None:
        status = ready.status
        for failure in status.failures:
            _say(f"capsule {failure.folder} not loaded: {failure.error}")
        names = ", ".join(c.name for c in status.capsules) or "none"
        line = f"ready in {status.seconds:.1f} s: {output.counted(len(status.capsules), 'capsule')} ({names})"
        if ready.capsules_elsewhere:  # --workers: the capsules run in them
            line = f"ready in {status.seconds:.1f} s: joined the capsule hosts"
        if ready.resources is not None:
            count = ready.resources  # a str says why it is unknown
            shown = output.counted(count, "resource") if isinstance(count, int) else f"{count} resources"
            line += f", {shown} for principal {ready.principal!r}"
        _say(line)
        for capsule_line in capsule_lines(status.capsules):
            _say(capsule_line)
        if ready.skills:  # the MCP Skills extension's (docs/skills.md)
            _say(f"  skills: {', '.join(ready.skills)}")
        _say(hint)
        if ready.watching_folders:
            _say(watching_line)

    return say_ready


def say_not_loaded(why: str) -> None:
    _say(f"capsules could not be loaded: {why}")


def capsule_lines(capsules) -> list[str]:
    """A server's banner lines for its loaded capsules (`CapsuleSummary`s): who each one is, then a
    warning for each that serves an older build than the code in its folder."""
    from astrid.host.capsule.discovery import stale_component

    lines = ["  " + capsule.identity_line() for capsule in capsules]
    for capsule in capsules:
        stale = stale_component(capsule.folder)
        if stale is not None:  # serving the last build, not the code in the folder
            lines.append(f"warning: {capsule.name}: {stale}")
    return lines


# -- config and install: a client's entry ----------------------------------------------------

CONFIG_LOCATIONS = (
    ("macOS", "~/Library/Application Support/Claude/claude_desktop_config.json"),
    ("Windows", r"%APPDATA%\Claude\claude_desktop_config.json"),
    ("Linux", "~/.config/Claude/claude_desktop_config.json  ($XDG_CONFIG_HOME/Claude/)"),
)


def config_entry(
    name: str,
    capsule_dirs: list[Path],
    principal: str | None,
    resource_tools: bool = False,
    config_file: Path | None = None,
) -> dict:
    """A Claude Desktop `mcpServers` entry that starts `astrid mcp serve` as this shell would."""
    return {"mcpServers": {name: server_entry(capsule_dirs, principal, resource_tools, config_file)}}


def http_config_entry(name: str, url: str) -> dict:
    """A client entry for a remote `astrid mcp serve --http` (the token stays a placeholder)."""
    return {"mcpServers": {name: http_entry(url)}}


def entry_options(function: Callable) -> Callable:
    """What the entry serves: the options `astrid mcp config` and `astrid mcp install` share."""
    function = click.option(
        "--resource-tools",
        is_flag=True,
        help="The entry starts the server with --resource-tools (the resources also as two read-only tools).",
    )(function)
    function = principal_option(function)
    function = capsules_option(function)
    function = click.option(
        "--http", "http_url", metavar="URL", default=None, help="An entry for a remote server at this URL."
    )(function)
    function = click.option(
        "--dev",
        "dev_folder",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        metavar="PATH",
        help="An entry for `astrid capsule dev PATH`: the capsule served from its sources while you write it.",
    )(function)
    return click.option(
        "--name",
        default=None,
        metavar="NAME",
        help="The server's name in the client's config [default: astrid plus the capsule folders' names, "
        "e.g. astrid-notes; astrid-HOST for --http; astrid for the capsule home alone].",
    )(function)


class ClientEntry:
    """The entry `astrid mcp config` prints and `astrid mcp install` writes, checked, and its name."""

    def __init__(
        self,
        name: str | None,
        http_url: str | None,
        capsule_dirs: tuple[Path, ...],
        principal: str | None,
        resource_tools: bool,
        dev_folder: Path | None = None,
    ) -> None:
        self.config = None
        self.http_url = http_url
        self.dev = dev_folder is not None
        if dev_folder is not None:
            if http_url is not None or capsule_dirs or resource_tools:
                raise UserError(
                    "--dev is an entry for one capsule folder served from its sources: "
                    "give it without --http, --capsules or --resource-tools"
                )
            folder = dev_folder.expanduser().resolve()
            if not (folder / MANIFEST).is_file():
                raise UserError(f"--dev {dev_folder}: no {MANIFEST} there (give a capsule folder)")
            if principal is not None:
                resolve_principal(principal)
            self.entry = dev_entry(folder, principal)
            self.name = name or f"astrid-dev-{default_name([folder]).removeprefix('astrid-')}"
        elif http_url is not None:
            if resource_tools:
                raise UserError(
                    "--resource-tools belongs to the server: start it with "
                    "`astrid mcp serve --http ... --resource-tools`; the client's entry is the same either way"
                )
            if capsule_dirs or principal:
                raise UserError(
                    "--capsules and --principal belong to the server: pass them to `astrid mcp serve --http`"
                )
            check_url(http_url)
            self.entry = http_entry(http_url)
            self.name = name or default_name([], http_url)
        else:
            for path in capsule_dirs:
                if not path.expanduser().exists():
                    raise UserError(f"--capsules {path}: no such folder")
            if principal is not None:
                resolve_principal(principal)
            paths = [path.expanduser().resolve() for path in capsule_dirs]
            self.config = load_config(explicit_config_file())
            if self.config is not None and "http_address" in self.config.values:
                raise UserError(
                    f"{self.config.path} sets http: a client starts its server on stdio, so its entry cannot read "
                    "that file; keep the HTTP settings in another one (astrid --config FILE mcp serve), "
                    "or give --http URL for an entry of the remote server"
                )
            config_path = self.config.path if self.config is not None else None
            self.entry = server_entry(paths, principal, resource_tools, config_path)
            self.name = name or default_name(paths or (self.config.capsule_dirs if self.config else []))
        check_name(self.name)

    def notes(self) -> list[str]:
        """What the user should know about the entry (stderr)."""
        if self.http_url is not None:
            return ["Replace <token> with the token `astrid mcp token add NAME` printed on the server."]
        if self.dev:
            return ["The client starts the capsule in dev mode: every saved edit is live, nothing is built."]
        lines = []
        if self.config is not None:
            lines.append(f"The server reads its settings from {self.config.path} (--config; flags in args win).")
        lines.append(
            f"The capsule home (always served when it exists) is {_home()}; "
            "the server runs as the OS user unless a principal is given."
        )
        return lines


@mcp.command("config")
@entry_options
@click.option(
    "--client",
    "client_key",
    type=click.Choice(list(CLIENTS)),
    default="claude-desktop",
    show_default=True,
    help="Print the entry in this client's shape.",
)
def mcp_config(
    name: str | None,
    dev_folder: Path | None,
    http_url: str | None,
    capsule_dirs: tuple[Path, ...],
    principal: str | None,
    resource_tools: bool,
    client_key: str,
) -> None:
    """Print a client entry: for `astrid mcp serve` on stdio, or with --http URL for a remote server.

    The JSON goes to stdout (merge its entry into the client's config, or let
    `astrid mcp install CLIENT` do it); where the file lives goes to stderr.
    """
    client = CLIENTS[client_key]
    made = ClientEntry(name, http_url, capsule_dirs, principal, resource_tools, dev_folder)
    if http_url is not None and client.http_type is None:
        printed = http_config_entry(made.name, http_url)  # the common shape; Claude Desktop takes the URL in the app
    else:
        printed = client.wrapped(made.name, made.entry)
    click.echo(json.dumps(printed, indent=2))
    click.echo("", err=True)
    if http_url is not None:
        for line in made.notes():
            click.echo(line, err=True)
        click.echo(
            "Clients that take remote servers in their config file (`type: http`, `url`, `headers`) use it as is; "
            "in Claude Desktop, add the URL under Settings > Connectors.",
            err=True,
        )
        return
    if client.key == "claude-desktop":
        click.echo(
            "Merge the entry above into `mcpServers` of claude_desktop_config.json, then restart the app:", err=True
        )
        for system, location in CONFIG_LOCATIONS:
            click.echo(f"  {system + ':':9} {location}", err=True)
    else:
        click.echo(f"Merge the entry above into `{client.servers_key}` of {client.config_file()}.", err=True)
    click.echo(f"Or let astrid merge it: `astrid mcp install {client.key}` with the same options.", err=True)
    for line in made.notes():
        click.echo(line, err=True)


@mcp.group("install")
def mcp_install() -> None:
    """Add the server to a client's config file (claude-desktop, claude-code, cursor, vscode), or write a
    systemd unit that runs it as an HTTP service (systemd)."""


def _client_install_command(client: Client) -> click.Command:
    """`astrid mcp install CLIENT`, one subcommand per client."""

    @entry_options
    @click.option(
        "--config-file",
        "client_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        metavar="PATH",
        help="The client's config file to change [default: where CLIENT keeps it on this platform].",
    )
    @click.option("--replace", is_flag=True, help="Overwrite an entry of the same name that differs.")
    def install_in_client(
        name: str | None,
        dev_folder: Path | None,
        http_url: str | None,
        capsule_dirs: tuple[Path, ...],
        principal: str | None,
        resource_tools: bool,
        client_file: Path | None,
        replace: bool,
    ) -> None:
        made = ClientEntry(name, http_url, capsule_dirs, principal, resource_tools, dev_folder)
        file = client_file.expanduser() if client_file is not None else client.config_file()
        done = install_entry(
            client, file, made.name, made.entry, replace=replace, explicit_file=client_file is not None
        )
        where = f"{client.title}'s {done.file}"
        if not done.changed:
            _say(f"{where} already has this entry as {made.name!r}: nothing changed")
            return
        verb = "replaced" if done.replaced else "added"
        _say(f"{verb} the server {made.name!r} in {where}" + (" (a new file)" if done.created else ""))
        if done.backup is not None:
            _say(f"the previous file is kept as {done.backup}")
        for line in made.notes():
            _say(line.replace("<token>", "<token> in that file"))
        _say(client.after)

    install_in_client.__doc__ = f"""Add the server to {client.title}'s own config file.

    The entry is the one `astrid mcp config --client {client.key}` prints. Other servers and
    keys stay as they are; the previous file is kept as FILE.bak-DATE-TIME; running
    it again changes nothing. A file that is not a JSON object is left alone.
    """
    return mcp_install.command(client.key)(install_in_client)


for _client in CLIENTS.values():
    _client_install_command(_client)


@mcp_install.command("systemd")
@click.option(
    "--output",
    "-o",
    "output_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="PATH",
    help="Write the unit to this file, e.g. /etc/systemd/system/astrid.service [default: print it].",
)
@click.option("--force", is_flag=True, help="Overwrite the --output file when it exists.")
@click.option(
    "--user",
    default="astrid",
    show_default=True,
    metavar="NAME",
    help="The dedicated system user the service runs as; also names its folders /var/lib/NAME, /var/cache/NAME.",
)
def install_systemd(output_file: Path | None, force: bool, user: str) -> None:
    """Write a systemd unit that runs `astrid mcp serve --http` as a hardened service.

    Its flags come from astrid.toml (`astrid --config FILE mcp install systemd`,
    else ./astrid.toml or the user config dir's), whose [serve] table must set
    http; run it again with --force after changing the file. The service runs as
    a dedicated user, may write only to /var/lib/NAME and /var/cache/NAME, and
    restarts on failure. The next steps go to stderr.
    """
    from astrid.cli.systemd_unit import USER_NAME, Unit, serve_flags

    if not USER_NAME.match(user):
        raise UserError(f"--user {user!r}: give a system user name (lower-case letters, digits, '-', '_'), e.g. astrid")
    config = load_config(explicit_config_file())
    if config is None:
        raise UserError(
            "no astrid.toml found: the unit runs `astrid mcp serve --http` with the settings of one; write it "
            '([serve] with http = "127.0.0.1:8000"; docs/operations.md), '
            "then run `astrid --config FILE mcp install systemd`"
        )
    if "http_address" not in config.values:
        raise UserError(
            f'{config.path} sets no http: the unit runs an HTTP server; add http = "127.0.0.1:8000" to its [serve]'
        )
    if "@" in config.values.get("bus_url", "").partition("://")[2].partition("/")[0]:
        raise UserError(
            f"{config.path}: bus holds a credential, which a unit file would show to every local user; "
            "use nats-creds = FILE instead"
        )
    command, *prefix = astrid_command()
    serve_args = ["mcp", "serve", *serve_flags(mcp_serve, config.values)]
    unit = Unit([command, *prefix], serve_args, user=user, folder=user, source=str(config.path))
    text = unit.text()
    service = output_file.name if output_file is not None and output_file.suffix == ".service" else f"{user}.service"
    if output_file is None:
        click.echo(text, nl=False)
    else:
        target = output_file.expanduser()
        if target.exists() and not force:
            raise UserError(f"{target} exists: pass --force to overwrite it")
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {target} ({exc.strerror or exc}): pick another --output") from None
        _say(f"wrote the unit {service} to {target}")
    for problem in unit.unseen_paths():
        _say(f"warning: {problem}: install astrid and the files it serves outside home folders and /tmp")
    state = f"/var/lib/{user}"
    _say("next, as root:")
    _say(f"  useradd --system --user-group --home-dir {state} --shell /usr/sbin/nologin {user}   # once")
    if output_file is None or not str(output_file.expanduser().resolve()).startswith("/etc/systemd/system/"):
        _say(f"  save the unit as /etc/systemd/system/{service}")
    _say(f"  systemctl daemon-reload && systemctl enable --now {service}")
    _say(f"  journalctl -u {service} -f   # its log")
    _say(
        f"tokens, grants and capsules are the service user's: sudo -u {user} env ASTRID_CONFIG_DIR={state}/config "
        f"ASTRID_CAPSULE_HOME={state}/capsules {command} mcp token add NAME"
    )


def _home() -> Path:
    from astrid.host.settings import default_capsule_home

    return default_capsule_home()
