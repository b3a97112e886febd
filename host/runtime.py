"""The composition root: kernel, broker and a front-door client for one principal.

The one code path behind `astrid mcp serve` and `astrid resources list/read`
(and the place a multi-principal transport or a bus-only `host run` joins):

    runtime = Runtime(RuntimeConfig(capsule_paths=[...], principal="alice"))
    runtime.start(background=True)     # returns at once; loading runs on a thread
    runtime.wait_ready(60)             # what requests do before they go out
    runtime.list_resources()           # over the bus, through the broker's front door
    runtime.close()

The front-door client and the broker are host-native participants on the
kernel's bus (roles in `contract.topics`); the broker trusts exactly the
client's source-id as its ingress for reads. Nothing here speaks MCP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from astrid.host.broker import Broker, FrontDoorClient
from astrid.host.bus import Principal, Subscription
from astrid.host.contract.frontdoor import ReadResourceReply
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.topics import BROKER, FRONT_DOOR_CLIENT
from astrid.host.errors import BackendNotReady
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.watch import WATCH_INTERVAL_S, FolderWatcher

log = logging.getLogger("astrid.host.runtime")


@dataclass
class RuntimeConfig:
    capsule_paths: list[Path]
    principal: str
    cache_dir: Path | None = None
    limits: Limits = DEFAULT_LIMITS


@dataclass
class CapsuleSummary:
    name: str
    source_id: str
    folder: Path


@dataclass
class LoadFailure:
    folder: Path
    error: str


@dataclass
class Status:
    capsules: list[CapsuleSummary] = field(default_factory=list)
    failures: list[LoadFailure] = field(default_factory=list)
    seconds: float = 0.0


KernelFactory = Callable[[RuntimeConfig], Any]


def _real_kernel(config: RuntimeConfig) -> Any:
    from astrid.host.kernel.kernel import Kernel, KernelConfig

    return Kernel(
        KernelConfig(capsule_paths=list(config.capsule_paths), cache_dir=config.cache_dir, limits=config.limits)
    )


class Runtime:
    """Kernel + broker + front-door client for one principal (implements the server's Backend)."""

    def __init__(self, config: RuntimeConfig, kernel_factory: KernelFactory | None = None) -> None:
        self.config = config
        self.principal = config.principal
        self.limits = config.limits
        self._kernel_factory = kernel_factory or _real_kernel
        self.kernel: Any = None
        self.broker: Broker | None = None
        self.client: FrontDoorClient | None = None
        self.status = Status()
        self._ready = threading.Event()
        self._error: str | None = None
        self._watcher: FolderWatcher | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, *, background: bool = True) -> None:
        if background:
            threading.Thread(target=self._start, name="astrid-load", daemon=True).start()
        else:
            self._start()
            if self._error is not None:
                raise BackendNotReady(self._error)

    def _start(self) -> None:
        started = time.perf_counter()
        try:
            kernel = self._kernel_factory(self.config)
            self.kernel = kernel
            ingress = FRONT_DOOR_CLIENT.participant()
            self.broker = Broker(
                kernel.bus, participant=BROKER.participant(), limits=self.limits, trusted_ingress=[ingress.source_id]
            ).start()
            principal = kernel.watch_principal(self.principal)
            if not isinstance(principal, Principal):
                principal = Principal.verified(self.principal)
            self.client = FrontDoorClient(kernel.bus, ingress, principal, limits=self.limits)
            report = kernel.start()
            self._record(report, time.perf_counter() - started)
        except Exception as exc:  # reported to every request, and on stderr
            log.exception("the kernel failed to start")
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            self._ready.set()

    def _record(self, report: Iterable[Any], seconds: float) -> None:
        status = Status(seconds=seconds)
        for result in report or ():
            if getattr(result, "ok", False):
                status.capsules.append(CapsuleSummary(result.name, result.source_id, result.folder))
            else:
                status.failures.append(LoadFailure(result.folder, getattr(result, "error", None) or "failed"))
        self.status = status

    def wait_ready(self, timeout_s: float) -> None:
        if not self._ready.wait(timeout_s):
            raise BackendNotReady(f"capsules still loading after {timeout_s:g} s")
        if self._error is not None:
            raise BackendNotReady(self._error)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self._error is None

    def reload(self) -> Status:
        """Rescan the capsule folders (the kernel announces a changed set)."""
        self.wait_ready(600)
        started = time.perf_counter()
        report = self.kernel.reload()
        self._record(report, time.perf_counter() - started)
        return self.status

    def watch_folders(self, interval_s: float = WATCH_INTERVAL_S) -> FolderWatcher:
        """Hot reload: reload when a file under a capsule path changes."""
        if self._watcher is None:
            self._watcher = FolderWatcher(self.config.capsule_paths, self._on_folders_changed, interval_s)
            self._watcher.start()
        return self._watcher

    def _on_folders_changed(self) -> None:
        if not self.ready:
            return
        log.info("capsule folders changed; reloading")
        reported = {(f.folder, f.error) for f in self.status.failures}
        status = self.reload()
        for failure in status.failures:
            if (failure.folder, failure.error) not in reported:  # new, or failing differently
                log.error("capsule %s not loaded: %s", failure.folder, failure.error)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._watcher is not None:
            self._watcher.stop()
        if self.broker is not None:
            self.broker.close()
        if self.kernel is not None:
            try:
                self.kernel.close()
            except Exception:
                log.exception("kernel close failed")

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the backend -------------------------------------------------------------------

    def _client(self) -> FrontDoorClient:
        self.wait_ready(600)
        assert self.client is not None
        return self.client

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]:
        return self._client().list_resources(refresh=refresh)

    def read_resource(self, uri: str) -> ReadResourceReply:
        return self._client().read_resource(uri)

    def changes(self) -> Subscription:
        return self._client().changes()
