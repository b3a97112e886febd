"""Capsules on this machine for an MCP server elsewhere (`astrid host run`): no MCP here, the kernel
answers the broker's requests that reach it over NATS (docs/nats.md).

    with CapsuleHost(config, telemetry) as hosting:
        started = hosting.start_telemetry()
        status = hosting.start(watch=True)    # the capsules on the bus, the watchers running
        if not hosting.stopped:               # (a signal while they loaded: a compile under way was killed)
            hosting.wait_for_stop()           # until SIGINT or SIGTERM (a second one exits at once)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from astrid.host.runtime import (
    RuntimeConfig,
    Status,
    capsule_folder_watcher,
    make_kernel,
    reloader,
    stop_compiling,
    watch_kernel,
)
from astrid.host.serving.signals import stop_signal_pipe
from astrid.host.serving.telemetry import Telemetry, TelemetryStarted
from astrid.host.tuning import WATCH_TUNING
from astrid.host.watch import FolderWatcher, MountWatcher


class CapsuleHost:
    def __init__(self, config: RuntimeConfig, telemetry: Telemetry) -> None:
        self.config = config
        self.telemetry = telemetry
        self.kernel: Any = None
        self.watching_folders = False
        self._stopping: list[Callable[[], None]] = []  # run in reverse on close
        self._stop_signal: int | None = None
        self.stopped = False  # a first SIGINT or SIGTERM came

    def __enter__(self) -> CapsuleHost:
        self._stopping.append(self.telemetry.close)
        return self

    def start_telemetry(self) -> TelemetryStarted:
        return self.telemetry.start()

    def start(self, *, watch: bool) -> Status:
        """Load the capsules and join the bus; watch what their reads touched and, with `watch`,
        their folders. From here on SIGINT and SIGTERM stop it (`wait_for_stop` returns); one that
        comes while the capsules load kills a compile under way and ends the start (`stopped`)."""
        # Before anything: a supervisor (serve's --workers) may stop us during a first compile, and
        # SIGTERM's default action would skip the stop in order.
        self._stop_signal = stop_signal_pipe(on_first=self._stop)
        kernel = self.kernel = make_kernel(self.config, role="capsules")
        self._stopping.append(kernel.close)
        if self.stopped:  # while the kernel was made: it compiles nothing
            stop_compiling(kernel)
        self._stopping.append(watch_kernel(kernel))
        status = Status.of(kernel.start())
        if self.stopped:
            return status
        # A change to a file a resource read touched updates that resource for its subscribers
        # (the folders those reads looked under are polled; the MCP server's broker checks the news).
        files = MountWatcher(
            kernel.read_folders, lambda _users: None, WATCH_TUNING.interval_s, on_files=kernel.files_changed
        )
        self._running(files)
        if watch and self.config.capsule_paths:
            # A rebuilt capsule has a new source-id: the host beats at once with it, and the MCP
            # servers on the bus re-list (clients whose URIs changed get list_changed).
            self._running(capsule_folder_watcher(self.config, reloader(kernel, status), WATCH_TUNING.interval_s))
            self.watching_folders = True
        return status

    def _stop(self) -> None:
        """In the first signal's handler: a flag, and the compile's child process killed (no lock)."""
        self.stopped = True
        if self.kernel is not None:
            stop_compiling(self.kernel)

    def _running(self, watcher: MountWatcher | FolderWatcher) -> None:
        watcher.start()
        self._stopping.append(watcher.stop)

    def wait_for_stop(self) -> None:
        assert self._stop_signal is not None, "start() first"
        os.read(self._stop_signal, 1)  # a signal interrupts the read, runs its handler, then the byte is read

    def __exit__(self, *exc: object) -> None:
        while self._stopping:
            self._stopping.pop()()


def host_nats_permissions(folders: Iterable[Path]) -> dict[str, list[str]]:
    """The nats-server permissions of a host running the capsules in `folders`: it may publish only
    what their manifests allow on the resource topics (replies and events), the bus's own host
    topics, the host's announcement of a changed file when a capsule reads files, and the kv
    bucket's JetStream subjects when a capsule asks for kv."""
    from astrid.host.bus.nats import host_permissions
    from astrid.host.capabilities.plugins.fs import FS
    from astrid.host.capabilities.plugins.kv import KV
    from astrid.host.capsule.manifest import load_manifest
    from astrid.host.contract.topics import (
        HOST_CLUSTER,
        RESOURCE_EVENTS,
        RESOURCE_REPLIES,
        RESOURCE_REQUESTS,
        RESOURCE_UPDATED_TOPIC,
    )

    crossing = (RESOURCE_REPLIES.removesuffix("*"), RESOURCE_EVENTS.removesuffix("*"))  # only these leave a host
    manifests = [load_manifest(folder) for folder in folders]
    publish = [pattern for manifest in manifests for pattern in manifest.publish if pattern.startswith(crossing)]
    if any(manifest.capabilities.of(FS) for manifest in manifests):
        publish.append(RESOURCE_UPDATED_TOPIC)
    rules = host_permissions(publish, HOST_CLUSTER, [RESOURCE_REQUESTS])
    if any(manifest.capabilities.of(KV) for manifest in manifests):  # kv state on JetStream (`--kv-store jetstream`)
        from astrid.host.capabilities.kv_nats import kv_permissions

        rules["publish"] = sorted({*rules["publish"], *kv_permissions()})
    return rules
