"""`astrid mcp ...` commands: serve (stdio) and config (Claude Desktop entry)."""

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
from astrid.cli.main import mcp
from astrid.host.settings import PATH_SETTINGS

log = logging.getLogger("astrid.cli")

PRINCIPAL_MAX = 128


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
    from astrid.host.settings import default_principal

    name = principal if principal is not None else default_principal()
    if not name:
        raise UserError("cannot tell which user to serve as: pass --principal NAME")
    if len(name) > PRINCIPAL_MAX or not name.isprintable() or name != name.strip():
        raise UserError(f"--principal {name!r}: use 1-{PRINCIPAL_MAX} printable characters without surrounding spaces")
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


def make_runtime(capsule_dirs: tuple[Path, ...], principal: str | None):
    from astrid.host.runtime import Runtime, RuntimeConfig

    return Runtime(
        RuntimeConfig(capsule_paths=resolve_capsule_paths(capsule_dirs), principal=resolve_principal(principal))
    )


def _say(message: str) -> None:
    click.echo(f"astrid: {message}", err=True)


# -- serve -----------------------------------------------------------------------------


@mcp.command("serve")
@capsules_option
@principal_option
@click.option("--watch/--no-watch", default=True, show_default=True, help="Reload capsules when their folders change.")
def mcp_serve(capsule_dirs: tuple[Path, ...], principal: str | None, watch: bool) -> None:
    """Serve capsule resources to an MCP client over stdio.

    stdout carries only JSON-RPC; everything else goes to stderr. The server
    answers `initialize` at once; capsules load in the background and
    requests wait for them.
    """
    import anyio

    from astrid.host.mcp.server import AstridMcpServer
    from astrid.host.settings import default_capsule_home

    runtime = make_runtime(capsule_dirs, principal)
    paths = runtime.config.capsule_paths
    _say(f"serving MCP resources on stdio for principal {runtime.principal!r}")
    if paths:
        _say("capsule paths: " + ", ".join(str(p) for p in paths))
    else:
        _say(f"no capsules: put some in {default_capsule_home()} or pass --capsules PATH")
    runtime.start(background=True)
    threading.Thread(target=_announce, args=(runtime, watch), name="astrid-announce", daemon=True).start()
    server = AstridMcpServer(runtime, limits=runtime.limits)
    try:
        anyio.run(server.run_stdio)
    except KeyboardInterrupt:
        pass
    finally:
        runtime.close()


def _announce(runtime, watch: bool) -> None:
    """Once loaded: what is served, and how to connect (stderr)."""
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
    try:
        count = str(len(runtime.list_resources()))
    except Exception as exc:  # the banner must not take the server down
        count = f"unknown ({exc})"
    if runtime.closed:  # the client left while we were loading
        return
    _say(
        f"ready in {status.seconds:.1f} s: {len(status.capsules)} capsules ({names}), "
        f"{count} resources for principal {runtime.principal!r}"
    )
    _say("connect a client: `astrid mcp config` prints a Claude Desktop entry")
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


def config_entry(name: str, capsule_dirs: list[Path], principal: str | None) -> dict:
    command, *prefix = astrid_command()
    args = [*prefix, "mcp", "serve"]
    for path in capsule_dirs:
        args += ["--capsules", str(path)]
    if principal:
        args += ["--principal", principal]
    # Clients start servers with a minimal environment: pass astrid's own settings on.
    env = {key: os.environ[key] for key in PATH_SETTINGS if os.environ.get(key)}
    return {"mcpServers": {name: {"command": command, "args": args, "env": env}}}


@mcp.command("config")
@click.option("--name", default="astrid", show_default=True, help="The server's name in the client's config.")
@capsules_option
@principal_option
def mcp_config(name: str, capsule_dirs: tuple[Path, ...], principal: str | None) -> None:
    """Print a claude_desktop_config.json entry for `astrid mcp serve`.

    The JSON goes to stdout (merge its `mcpServers` entry into the file);
    where the file lives goes to stderr.
    """
    for path in capsule_dirs:
        if not path.expanduser().exists():
            raise UserError(f"--capsules {path}: no such folder")
    if principal is not None:
        resolve_principal(principal)
    paths = [path.expanduser().resolve() for path in capsule_dirs]
    click.echo(json.dumps(config_entry(name, paths, principal), indent=2))
    click.echo("", err=True)
    click.echo("Merge the entry above into `mcpServers` of claude_desktop_config.json, then restart the app:", err=True)
    for system, location in CONFIG_LOCATIONS:
        click.echo(f"  {system + ':':9} {location}", err=True)
    click.echo(
        "The capsule home (always served when it exists) is "
        f"{_home()}; the server runs as the OS user unless --principal is given.",
        err=True,
    )


def _home() -> Path:
    from astrid.host.settings import default_capsule_home

    return default_capsule_home()
