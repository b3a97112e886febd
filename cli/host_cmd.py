"""`astrid host run`: capsules on this machine, joined to an MCP server elsewhere over NATS.

No MCP here: the kernel runs the capsules and answers the broker's requests
that reach it over the bus (docs/nats.md).
"""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import click

from astrid.cli.errors import UserError
from astrid.cli.main import cli
from astrid.cli.mcp_cmd import BusOptions, bus_options, capsules_option, resolve_capsule_paths


@cli.group()
def host() -> None:
    """Run capsules for an MCP server on another machine (over NATS)."""


@host.command("run")
@capsules_option
@bus_options
@click.option(
    "--kv-store",
    type=click.Choice(["jetstream", "sqlite"]),
    default="jetstream",
    show_default=True,
    help="Where astrid:kv keeps state: the NATS server's JetStream (shared by every host), "
    "or this machine's SQLite file (shared only by the hosts on this machine).",
)
def host_run(capsule_dirs: tuple[Path, ...], bus_url: str | None, nats_creds: Path | None, kv_store: str) -> None:
    """Run the capsules of --capsules (and the capsule home) on the bus at --bus until stopped (Ctrl-C or SIGTERM)."""
    from astrid.host.runtime import RuntimeConfig, make_kernel

    if bus_url is None:
        raise UserError(
            "astrid host run needs --bus nats://HOST:PORT or $ASTRID_BUS (the NATS server the MCP server uses)"
        )
    bus = BusOptions(bus_url, nats_creds)
    bus.kv_on_bus = kv_store == "jetstream"
    config = RuntimeConfig(capsule_paths=resolve_capsule_paths(capsule_dirs), principal=None)
    bus.apply(config)
    kernel = make_kernel(config, role="capsules")
    try:
        report = kernel.start()
        loaded = [result.name for result in report if result.ok]
        failed = [result for result in report if not result.ok]
        for result in failed:
            click.echo(f"astrid: capsule {result.folder} not loaded: {result.error}", err=True)
        shown = bus_url.split("@")[-1]
        click.echo(f"astrid: hosting {len(loaded)} capsules ({', '.join(loaded) or 'none'}) on {shown}", err=True)
        click.echo("astrid: an `astrid mcp serve --bus` on the same NATS server serves them; Ctrl-C stops", err=True)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        stop.wait()
    finally:
        kernel.close()


@host.command("nats-permissions")
@capsules_option
@click.option("--user", default="capsule-host", show_default=True, help="The NATS user the host connects as.")
def host_nats_permissions(capsule_dirs: tuple[Path, ...], user: str) -> None:
    """Print the nats-server `authorization` entry for a host running the capsules of --capsules.

    The host may publish only what its capsules' manifests allow on the
    resource topics, plus the bus's own host topics, plus, when a capsule asks
    for kv, the JetStream subjects of the kv bucket alone. Add a password (or use
    nkeys) and put the entry in the server's `authorization { users = [...] }`.
    """
    from astrid.host.bus.nats import host_permissions
    from astrid.host.contract.topics import HOST_CLUSTER, RESOURCE_REPLIES, RESOURCE_REQUESTS
    from astrid.host.kernel.loader import discover_capsules
    from astrid.host.kernel.manifest import load_manifest

    folders = discover_capsules(resolve_capsule_paths(capsule_dirs))
    if not folders:
        raise UserError("no capsules found: pass --capsules PATH (a capsule folder or a folder of them)")
    replies = RESOURCE_REPLIES.removesuffix("*")  # only replies cross from a capsule host
    manifests = [load_manifest(folder) for folder in folders]
    publish = [pattern for manifest in manifests for pattern in manifest.publish if pattern.startswith(replies)]
    rules = host_permissions(publish, HOST_CLUSTER, [RESOURCE_REQUESTS])
    if any(manifest.capabilities.kv for manifest in manifests):  # kv state on JetStream (`--kv-store jetstream`)
        from astrid.host.capabilities.kv_nats import kv_permissions

        rules["publish"] = sorted({*rules["publish"], *kv_permissions()})
    click.echo(json.dumps({"user": user, "password": "CHANGE-ME", "permissions": rules}, indent=2))
