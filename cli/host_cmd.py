"""`astrid host run`: capsules on this machine, joined to an MCP server elsewhere over NATS.

No MCP here: the kernel runs the capsules and answers the broker's requests
that reach it over the bus (docs/nats.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from astrid.cli import output
from astrid.cli.errors import UserError
from astrid.cli.main import cli
from astrid.cli.mcp_cmd import (
    WATCHING_LINE,
    BusOptions,
    bus_options,
    capsule_lines,
    capsules_option,
    resolve_capsule_paths,
    show_server_events,
    watch_option,
)
from astrid.cli.observe import Observability, observability_options
from astrid.cli.start_up import quiet_start_up, serving


@cli.group()
def host() -> None:
    """Run capsules for an MCP server on another machine (over NATS)."""


@host.command("run")
@capsules_option
@watch_option
@bus_options
@observability_options
@click.option(
    "--kv-store",
    type=click.Choice(["jetstream", "sqlite"]),
    default="jetstream",
    show_default=True,
    help="Where astrid:kv keeps state: the NATS server's JetStream (shared by every host), "
    "or this machine's SQLite file (shared only by the hosts on this machine).",
)
@quiet_start_up
def host_run(
    capsule_dirs: tuple[Path, ...],
    watch: bool,
    bus_url: str | None,
    nats_creds: Path | None,
    otel: bool,
    metrics_address: str | None,
    metrics_public: bool,
    log_format: str,
    kv_store: str,
) -> None:
    """Run the capsules of --capsules (and the capsule home) on the bus at --bus until stopped (Ctrl-C or SIGTERM).

    Traces (OTEL_* or --otel; a request's trace continues here from the MCP server's), metrics
    (--metrics) and JSON log lines (--log-format json) as for `astrid mcp serve` (docs/operations.md).
    """
    from astrid.host.runtime import RuntimeConfig
    from astrid.host.serving.capsule_host import CapsuleHost

    observing = Observability(otel, metrics_address, metrics_public, log_format, service="astrid-host")
    if bus_url is None:
        raise UserError(
            "astrid host run needs --bus nats://HOST:PORT or $ASTRID_BUS (the NATS server the MCP server uses)"
        )
    bus = BusOptions(bus_url, nats_creds)
    bus.kv_on_bus = kv_store == "jetstream"
    config = RuntimeConfig(capsule_paths=resolve_capsule_paths(capsule_dirs), principal=None)
    bus.apply(config)
    with CapsuleHost(config, observing.telemetry()) as hosting:
        for line in observing.lines(hosting.start_telemetry()):
            output.say(line)
        show_server_events()  # reloads, files changed: as `astrid mcp serve` says them
        status = hosting.start(watch=watch)
        if hosting.stopped:  # a signal while the capsules loaded: stopped, nothing hosted
            output.say("stopped while the capsules loaded")
            return
        for failure in status.failures:
            output.say(f"capsule {failure.folder} not loaded: {failure.error}", level="error")
        shown = bus_url.split("@")[-1]
        names = ", ".join(capsule.name for capsule in status.capsules) or "none"
        output.say(f"hosting {output.counted(len(status.capsules), 'capsule')} ({names}) on {shown}")
        for line in capsule_lines(status.capsules):
            output.say(line)
        if hosting.watching_folders:
            output.say(WATCHING_LINE)
        output.say("an `astrid mcp serve --bus` on the same NATS server serves them; Ctrl-C stops")
        serving()
        hosting.wait_for_stop()


@host.command("nats-permissions")
@capsules_option
@click.option("--user", default="capsule-host", show_default=True, help="The NATS user the host connects as.")
def host_nats_permissions(capsule_dirs: tuple[Path, ...], user: str) -> None:
    """Print the nats-server `authorization` entry for a host running the capsules of --capsules.

    The host may publish only what its capsules' manifests allow on the
    resource topics (replies and events), plus the bus's own host topics,
    `resource.v1.event.updated` when a capsule reads files (the host announces
    a changed file for it), and, when a capsule asks for kv, the JetStream
    subjects of the kv bucket alone. Add a password (or use nkeys) and put the
    entry in the server's `authorization { users = [...] }`.
    """
    from astrid.host.capsule.discovery import discover_capsules
    from astrid.host.serving.capsule_host import host_nats_permissions

    folders = discover_capsules(resolve_capsule_paths(capsule_dirs))
    if not folders:
        raise UserError("no capsules found: pass --capsules PATH (a capsule folder or a folder of them)")
    rules = host_nats_permissions(folders)
    click.echo(json.dumps({"user": user, "password": "CHANGE-ME", "permissions": rules}, indent=2))
