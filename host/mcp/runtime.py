"""Start the kernel and the broker for one principal: the one code path behind
`astrid mcp serve` and `astrid resources list/read`.

    runtime = Runtime(RuntimeConfig(capsule_paths=[...], principal="alice"))
    runtime.start(background=True)     # returns at once; loading runs on a thread
    runtime.wait_ready(60)             # what requests do before they go out
    runtime.list_resources()           # over the bus, through the broker's front door
    runtime.close()

The MCP participant and the broker are host-native participants on the
kernel's bus; the broker trusts exactly the MCP participant's source-id as
its ingress for reads.
"""

from __future__ import annotations

import getpass
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from astrid.host.broker.broker import BROKER_PUBLISH, BROKER_SUBSCRIBE, Broker
from astrid.host.contract.frontdoor import ReadResourceReply
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.kernel.bus import Principal, Subscription
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.mcp.frontdoor import MCP_PUBLISH, MCP_SUBSCRIBE, FrontDoorClient
from astrid.host.mcp.server import BackendNotReady
from astrid.host.settings import CAPSULE_HOME_ENV, path_setting

log = logging.getLogger("astrid.host.mcp")

WATCH_INTERVAL_S = 1.0


def default_capsule_home() -> Path:
    """`$ASTRID_CAPSULE_HOME`, else the user data dir + `capsules`
    (Linux `~/.local/share/astrid/capsules`, macOS
    `~/Library/Application Support/astrid/capsules`, Windows
    `%LOCALAPPDATA%\\astrid\\capsules`)."""
    default = Path(platformdirs.user_data_dir("astrid", appauthor=False)) / "capsules"
    return path_setting(CAPSULE_HOME_ENV, default).expanduser()


def default_principal() -> str | None:
    """The OS user running the process, or None when there is none."""
    try:
        name = getpass.getuser()
    except Exception:  # no passwd entry, no USER: the caller asks for --principal
        return None
    return name or None


def capsule_paths(extra: Iterable[Path | str] = (), *, include_home: bool = True) -> list[Path]:
    """The capsule home (when it exists) and then every extra path, deduplicated."""
    paths: list[Path] = []
    if include_home:
        home = default_capsule_home()
        if home.is_dir():
            paths.append(home)
    for path in extra:
        resolved = Path(path).expanduser().resolve()
        if resolved not in paths:
            paths.append(resolved)
    return paths


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
            mcp = kernel.attach_host("mcp-server", publish=list(MCP_PUBLISH), subscribe=list(MCP_SUBSCRIBE))
            broker_participant = kernel.attach_host(
                "broker", publish=list(BROKER_PUBLISH), subscribe=list(BROKER_SUBSCRIBE)
            )
            self.broker = Broker(
                kernel.bus, participant=broker_participant, limits=self.limits, trusted_ingress=[mcp.source_id]
            ).start()
            principal = kernel.watch_principal(self.principal)
            if not isinstance(principal, Principal):
                principal = Principal.verified(self.principal)
            self.client = FrontDoorClient(kernel.bus, mcp, principal, limits=self.limits)
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

    def watch_folders(self, interval_s: float = WATCH_INTERVAL_S) -> "FolderWatcher":
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

    def __enter__(self) -> "Runtime":
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


class FolderWatcher:
    """Polls the mtimes under some folders; calls back once a change has settled.

    A change is acted on when two polls in a row agree on the new state, so a
    build that writes several files triggers one reload, not one per file.
    """

    MAX_FILES = 20_000
    _SKIP_DIRS = {"__pycache__", ".git", "node_modules", ".pytest_cache"}

    def __init__(self, paths: Iterable[Path], on_change: Callable[[], None], interval_s: float) -> None:
        self.paths = [Path(p) for p in paths]
        self.on_change = on_change
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="astrid-watch", daemon=True)
        self._current: frozenset[tuple[str, int, int]] = frozenset()
        self.reloads = 0

    def start(self) -> None:
        # The baseline is taken before start() returns: a change made right
        # after "watching" is announced must differ from it, not become it.
        self._current = self.signature()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def signature(self) -> frozenset[tuple[str, int, int]]:
        entries: set[tuple[str, int, int]] = set()
        for root in self.paths:
            if not root.exists():
                continue
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = [d for d in dirnames if d not in self._SKIP_DIRS and not d.startswith(".")]
                for filename in filenames:
                    if filename.endswith((".tmp", ".pyc")) or filename.startswith("."):
                        continue
                    path = os.path.join(dirpath, filename)
                    try:
                        stat = os.stat(path)
                    except OSError:
                        continue
                    entries.add((path, stat.st_mtime_ns, stat.st_size))
                    if len(entries) >= self.MAX_FILES:
                        return frozenset(entries)
        return frozenset(entries)

    def _run(self) -> None:
        current = self._current
        pending: frozenset[tuple[str, int, int]] | None = None
        while not self._stop.wait(self.interval_s):
            try:
                seen = self.signature()
                if seen == current:
                    pending = None
                    continue
                if pending is None or seen != pending:
                    pending = seen  # changed; wait for it to settle
                    continue
                current, pending = seen, None
                self.reloads += 1
                self.on_change()
            except Exception:
                log.exception("capsule folder watch failed; still watching")
