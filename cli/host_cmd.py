"""`astrid host run`: capsules on this machine, joined to an MCP server elsewhere over NATS.

No MCP here: the kernel runs the capsules and answers the broker's requests
that reach it over the bus (docs/nats.md).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import click

from astrid.cli import output
from astrid.cli.errors import UserError
from astrid.cli.main import cli
from astrid.cli.mcp_cmd import (
    INTERRUPTED_EXIT,
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

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
    from astrid.host.runtime import (
        RuntimeConfig,
        Status,
        capsule_folder_watcher,
        make_kernel,
        reloader,
        watch_kernel,
    )
    from astrid.host.tuning import WATCH_TUNING
    from astrid.host.watch import FolderWatcher, MountWatcher

    observing = Observability(otel, metrics_address, metrics_public, log_format, service="astrid-host")
    if bus_url is None:
        raise UserError(
            "astrid host run needs --bus nats://HOST:PORT or $ASTRID_BUS (the NATS server the MCP server uses)"
        )
    bus = BusOptions(bus_url, nats_creds)
    bus.kv_on_bus = kv_store == "jetstream"
    config = RuntimeConfig(capsule_paths=resolve_capsule_paths(capsule_dirs), principal=None)
    bus.apply(config)
    for line in observing.start():
        output.say(line)
    try:
        kernel = make_kernel(config, role="capsules")
    except BaseException:
        observing.close()
        raise
    forget_gauges = watch_kernel(kernel)
    show_server_events()  # reloads, files changed: as `astrid mcp serve` says them
    watcher: MountWatcher | None = None
    folders: FolderWatcher | None = None
    try:
        status = Status.of(kernel.start())
        # A change to a file a resource read touched updates that resource for its subscribers
        # (the folders those reads looked under are polled; the MCP server's broker checks the news).
        watcher = MountWatcher(
            kernel.read_folders, lambda _users: None, WATCH_TUNING.interval_s, on_files=kernel.files_changed
        )
        watcher.start()
        if watch and config.capsule_paths:
            # A rebuilt capsule has a new source-id: the host beats at once with it, and the MCP
            # servers on the bus re-list (clients whose URIs changed get list_changed).
            folders = capsule_folder_watcher(config, reloader(kernel, status), WATCH_TUNING.interval_s)
            folders.start()
        # Before the banner: whoever waits for it (serve's --workers, a test, a supervisor) may stop
        # us the moment it shows, and SIGTERM's default action would skip the stop in order.
        stop_signal = _stop_signal_pipe()
        for failure in status.failures:
            output.say(f"capsule {failure.folder} not loaded: {failure.error}", level="error")
        shown = bus_url.split("@")[-1]
        names = ", ".join(capsule.name for capsule in status.capsules) or "none"
        output.say(f"hosting {len(status.capsules)} capsules ({names}) on {shown}")
        for line in capsule_lines(status.capsules):
            output.say(line)
        if folders is not None:
            output.say(WATCHING_LINE)
        output.say("an `astrid mcp serve --bus` on the same NATS server serves them; Ctrl-C stops")
        serving()
        os.read(stop_signal, 1)  # a signal interrupts the read, runs its handler, and the read then returns its byte
    finally:
        for stopping in (folders, watcher):
            if stopping is not None:
                stopping.stop()
        forget_gauges()
        kernel.close()
        observing.close()


def _stop_signal_pipe() -> int:
    """Handle SIGINT and SIGTERM from now on; returns the pipe end that gets a byte on the first one.
    After it, a second one exits at once (a stop that hangs can be cut short).

    The handler only writes a byte to a pipe: a handler that takes a lock (`Event.set`) deadlocks
    when a second signal lands while the first still holds it, and the stop then never happens."""
    woken, wake = os.pipe()
    if hasattr(os, "set_blocking"):  # POSIX (a Windows pipe holds the one byte anyway)
        os.set_blocking(wake, False)

    def again(signum, frame) -> None:
        os.write(2, b"astrid: stopped at once\n")  # the fd itself: never a lock sys.stderr may hold
        os._exit(INTERRUPTED_EXIT)

    def first(signum, frame) -> None:
        for stopping in STOP_SIGNALS:
            signal.signal(stopping, again)
        try:
            os.write(wake, b"x")
        except OSError:  # the pipe is full: the byte it holds wakes the reader anyway
            pass

    for signum in STOP_SIGNALS:
        signal.signal(signum, first)
    return woken


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
    from astrid.host.bus.nats import host_permissions
    from astrid.host.capsule.discovery import discover_capsules
    from astrid.host.capsule.manifest import load_manifest
    from astrid.host.contract.topics import (
        HOST_CLUSTER,
        RESOURCE_EVENTS,
        RESOURCE_REPLIES,
        RESOURCE_REQUESTS,
        RESOURCE_UPDATED_TOPIC,
    )

    folders = discover_capsules(resolve_capsule_paths(capsule_dirs))
    if not folders:
        raise UserError("no capsules found: pass --capsules PATH (a capsule folder or a folder of them)")
    # only replies and events cross from a capsule host
    crossing = (RESOURCE_REPLIES.removesuffix("*"), RESOURCE_EVENTS.removesuffix("*"))
    manifests = [load_manifest(folder) for folder in folders]
    publish = [pattern for manifest in manifests for pattern in manifest.publish if pattern.startswith(crossing)]
    from astrid.host.capabilities.plugins.fs import FS
    from astrid.host.capabilities.plugins.kv import KV

    if any(manifest.capabilities.of(FS) for manifest in manifests):
        publish.append(RESOURCE_UPDATED_TOPIC)  # the host's own announcement of a changed file, for the capsule
    rules = host_permissions(publish, HOST_CLUSTER, [RESOURCE_REQUESTS])
    if any(manifest.capabilities.of(KV) for manifest in manifests):  # kv state on JetStream (`--kv-store jetstream`)
        from astrid.host.capabilities.kv_nats import kv_permissions

        rules["publish"] = sorted({*rules["publish"], *kv_permissions()})
    click.echo(json.dumps({"user": user, "password": "CHANGE-ME", "permissions": rules}, indent=2))
