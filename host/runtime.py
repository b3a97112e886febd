"""The composition root: one kernel and one broker, and a broker client per principal.

The one code path behind `astrid mcp serve` and `astrid resources list/read`
(and the place a multi-principal transport or a bus-only `host run` joins):

    runtime = Runtime(RuntimeConfig(capsule_paths=[...], principal="alice"))
    runtime.start(background=True)     # returns at once; loading runs on a thread
    runtime.wait_ready(60)             # what requests do before they go out
    runtime.list_resources()           # a call to the broker (no bus)
    runtime.stop_loading()             # a server stopping: a first compile under way ends now
    runtime.close()

Each principal gets its own `BrokerClient` on first use (`client_for`): the
broker's calls, bound to `verified(principal)` (so the confused-deputy
property holds by construction), which also tells the kernel to announce
capsule-set changes to that principal and to prewarm its sandboxes. One
participant (the `MCP_SERVER` role) hears the capsule-set events and the
updates the broker checked. `config.principal` is the default principal (stdio, the CLI);
a multi-user transport passes each request's own. Nothing here speaks MCP.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from astrid.host.broker import Broker
from astrid.host.broker.client import BrokerClient
from astrid.host.bus import Bus, Dispatcher, Participant, Principal
from astrid.host.capsule.provenance import Provenance
from astrid.host.contract.local_replies import NO_LOCAL_REPLIES
from astrid.host.contract.outcomes import CompletionOutcome, ReadOutcome
from astrid.host.contract.resource import ResourceDefinition
from astrid.host.contract.template import ResourceTemplate
from astrid.host.contract.topics import (
    BROKER,
    CAPSULES_LOADED_TOPIC,
    HOST_CLUSTER,
    MCP_SERVER,
    RESOURCE_EVENTS,
    RESOURCE_REPLIES,
    RESOURCE_REQUESTS,
)
from astrid.host.errors import BackendNotReady, GrantError
from astrid.host.event_stream import EventStream
from astrid.host.identity.trust import TrustStore, default_trust_file
from astrid.host.identity.vetting import ClaimedIdentities, NamespaceAuthority, vetter
from astrid.host.limits import DEFAULT_LIMITS, DEFAULT_SUBSCRIPTION_LIMITS, Limits, SubscriptionLimits
from astrid.host.log_throttle import LogThrottle
from astrid.host.telemetry import metrics
from astrid.host.tuning import WATCH_TUNING
from astrid.host.watch import FolderWatcher, MountWatcher, ValueWatcher, events

log = logging.getLogger("astrid.host.runtime")


@dataclass
class RuntimeConfig:
    capsule_paths: list[Path]
    principal: str | None  # the default principal; None: every request names its own
    cache_dir: Path | None = None
    limits: Limits = DEFAULT_LIMITS
    # Live sandboxes (one per capsule and principal) before the least recently used
    # idle one is closed; its next call re-instantiates (see docs/performance.md).
    max_instances: int = 256
    # The operator's grants and the kv store (docs/capabilities.md); None: the user's.
    grants_file: Path | None = None
    kv_file: Path | None = None
    # A NATS server joining this process to capsule hosts elsewhere (docs/nats.md);
    # None: one process, the in-memory bus.
    bus_url: str | None = None
    nats_credentials: str | None = None
    # With a bus: kv state in the NATS server's JetStream (shared by every machine), or, False,
    # in the SQLite file as on one machine (the local workers of `--workers` share that file).
    kv_on_bus: bool = True
    # Called (on the loading thread) before this process joins the bus: `--workers` waits there
    # for its capsule hosts, so the first list already has their capsules. False: do not join.
    before_join: Callable[[], bool] | None = None
    # Called when the server stops while `before_join` waits: it returns False at once (no wait for
    # the capsule hosts' first compile), and this process serves nothing.
    stop_joining: Callable[[], None] | None = None
    # The publishers the operator trusts and who owns which URI namespace
    # (docs/publishing.md); None: the user's trust file.
    trust_file: Path | None = None
    # Resource subscriptions: the announcement rate the broker allows a capsule (docs/contract/subscriptions.md §11).
    subscription_limits: SubscriptionLimits = DEFAULT_SUBSCRIPTION_LIMITS
    # Dev mode (`astrid capsule dev`, serving/dev.py): the sources a folder is served from instead of its
    # component (the kernel's `KernelConfig.dev_sources`); None: every folder serves its build.
    dev_sources: Callable[[Path], Any] | None = None
    # How often hot reload polls the capsule folders (dev mode: more often).
    folder_poll_s: float = WATCH_TUNING.interval_s


@dataclass
class CapsuleSummary:
    name: str
    source_id: str
    folder: Path
    provenance: Provenance | None = None  # None: a stand-in kernel said nothing
    digest: str | None = None  # sha256:<hex> of the component (dev mode: of its sources)
    dev: bool = False  # served in dev mode (`astrid capsule dev`): its sources, not a build

    @classmethod
    def of(cls, result) -> CapsuleSummary:
        """The summary of a kernel's load result that says the capsule loaded."""
        return cls(
            result.name,
            result.source_id,
            result.folder,
            getattr(result, "provenance", None),
            getattr(result, "digest", None),
            bool(getattr(result, "dev", False)),
        )

    def identity_line(self) -> str:
        """`notes: publisher acme (key …), sha256:0123456789ab, namespaces astrid://notes/`."""
        who = self.provenance.label() if self.provenance is not None else "local, unsigned"
        namespaces = ", ".join(self.provenance.namespaces) if self.provenance is not None else ""
        digest = f", {self.digest[:19]}" if self.digest else ""
        dev = ", dev mode (its sources, not a build)" if self.dev else ""
        return f"{self.name}: {who}{digest}" + (f", namespaces {namespaces}" if namespaces else "") + dev


@dataclass
class LoadFailure:
    folder: Path
    error: str


@dataclass
class Status:
    capsules: list[CapsuleSummary] = field(default_factory=list)
    failures: list[LoadFailure] = field(default_factory=list)
    seconds: float = 0.0

    @classmethod
    def of(cls, report: Iterable[Any], seconds: float = 0.0) -> Status:
        """What a kernel's load report says: the capsules served and the folders that failed."""
        status = cls(seconds=seconds)
        for result in report or ():
            if getattr(result, "ok", False):
                status.capsules.append(CapsuleSummary.of(result))
            else:
                status.failures.append(LoadFailure(result.folder, getattr(result, "error", None) or "failed"))
        return status


LOAD_STOP_WAIT_S = 2.0  # how long a close waits for a load it stopped (it ends in milliseconds)


def stop_compiling(kernel: Any) -> None:
    """The kernel compiles nothing more, and a compile under way is killed (no lock taken)."""
    cache = getattr(kernel, "cache", None)  # a test's stand-in kernel may have none
    if cache is not None:
        cache.stop()


class CapsuleKernel(Protocol):
    """What the runtime needs of a kernel: `kernel.Kernel`, or a test's stand-in."""

    @property
    def bus(self) -> Bus: ...

    def watch_principal(self, name: str) -> Principal: ...
    def provenance_of(self, source_id: str) -> Provenance | None: ...
    def mount_folders(self) -> Mapping[Path, frozenset[Principal]]: ...
    def granted(self) -> Mapping[str, Any]: ...
    def announce(self, principals: Iterable[Principal] | None = None) -> None: ...
    def start(self) -> Iterable[Any]: ...
    def reload(self) -> Iterable[Any]: ...
    def close(self) -> None: ...


KernelFactory = Callable[[RuntimeConfig], CapsuleKernel]


def trust_store(config: RuntimeConfig) -> TrustStore:
    return TrustStore(config.trust_file or default_trust_file())


def _real_kernel(config: RuntimeConfig) -> CapsuleKernel:
    return make_kernel(config, role="mcp")


def make_kernel(config: RuntimeConfig, *, role: str) -> Any:
    """The kernel of this process: on the in-memory bus, or joined over NATS as
    `role` ("mcp": the broker's process; "capsules": `astrid host run`)."""
    # Imported here: wasmtime loads only when a runtime starts, not with the CLI.
    from astrid.host.kernel.kernel import Kernel, KernelConfig

    trust = trust_store(config)
    kernel_config = KernelConfig(
        capsule_paths=list(config.capsule_paths),
        cache_dir=config.cache_dir,
        limits=config.limits,
        max_instances=config.max_instances,
        grants_file=config.grants_file,
        kv_file=config.kv_file,
        vet=vetter(trust),
        vet_epoch=trust.signature,
        dev_sources=config.dev_sources,
    )
    url = config.bus_url
    if url is None:
        return Kernel(kernel_config)
    if config.before_join is not None and not config.before_join():
        return Kernel(kernel_config)  # stopped while it waited: no bus to join (nor its first beat to wait for)
    # Imported here: a server on the in-memory bus never loads NATS (start-up time).
    from astrid.host.bus.nats import NatsBus
    from astrid.host.capabilities.kv_nats import NatsKvStore

    def nats_bus(dispatcher: Dispatcher, max_payload_bytes: int) -> NatsBus:
        return NatsBus(
            url,
            role=role,
            cluster=HOST_CLUSTER,
            shared=(RESOURCE_REQUESTS, RESOURCE_REPLIES, RESOURCE_EVENTS),
            # the broker's process hears replies and events; a capsule host hears requests
            listen=(RESOURCE_REPLIES, RESOURCE_EVENTS) if role == "mcp" else (RESOURCE_REQUESTS,),
            tracked=(RESOURCE_REQUESTS,),
            credentials=config.nats_credentials,
            dispatcher=dispatcher,
            max_payload_bytes=max_payload_bytes,
        ).connect()

    kernel_config.bus_factory = nats_bus
    # state every replica sees: JetStream key-value on the same server (docs/nats.md)
    if config.kv_on_bus:
        kernel_config.kv_factory = NatsKvStore
    kernel = Kernel(kernel_config)
    bus = kernel.bus
    assert isinstance(bus, NatsBus)
    bus.capsule_set = lambda: [f"{c.name}@{c.source_id}" for c in kernel.loaded()]
    # who each signed capsule is, for the other hosts to verify themselves (docs/security.md)
    bus.capsule_claims = lambda: {c.source_id: c.provenance.claim for c in kernel.loaded() if c.provenance.claim}
    bus.on_membership_change = kernel.announce  # the broker re-describes; clients get list_changed
    kernel.set_changed = bus.capsule_set_changed  # a reload's new set is heard at once, not a beat later
    return kernel


def _namespace_authority(kernel: CapsuleKernel, trust: TrustStore) -> NamespaceAuthority:
    """Which URIs each capsule may serve: by who it is, whichever process runs it. Over NATS, another
    host's capsule is who that host's claim proves it is, checked here (`ClaimedIdentities`)."""
    claims_of = getattr(kernel.bus, "claims_of", None)  # only a NATS bus hears other hosts
    if claims_of is None:
        return NamespaceAuthority(trust, kernel.provenance_of)
    return NamespaceAuthority(trust, ClaimedIdentities(trust, kernel.provenance_of, claims_of))


def watch_kernel(kernel: Any) -> Callable[[], None]:
    """`--metrics`: the gauges a kernel answers (capsules loaded, live and quarantined sandboxes),
    read when scraped. Returns the call that stops them (a closed kernel answers nothing)."""
    forgets = [metrics.watch("astrid_capsules_loaded", metrics.one(lambda: len(kernel.loaded())))]
    sandboxes = getattr(kernel, "sandboxes", None)  # a test's stand-in kernel may have none
    if sandboxes is not None:
        forgets.append(metrics.watch("astrid_sandboxes_live", metrics.one(sandboxes.live_instances)))
        forgets.append(metrics.watch("astrid_sandboxes_quarantined", metrics.one(sandboxes.quarantined_now)))

    def forget() -> None:
        for each in forgets:
            each()

    return forget


class Runtime:
    """Kernel + broker + a broker client per principal (implements the server's Backend)."""

    def __init__(self, config: RuntimeConfig, kernel_factory: KernelFactory | None = None) -> None:
        self.config = config
        self.principal = config.principal
        self.limits = config.limits
        self._kernel_factory = kernel_factory or _real_kernel
        self.kernel: CapsuleKernel | None = None
        self.broker: Broker | None = None
        self.client: BrokerClient | None = None  # the default principal's
        self._ingress: Participant | None = None
        self._clients: dict[str, BrokerClient] = {}
        self._clients_lock = threading.Lock()
        self.status = Status()
        self._ready = threading.Event()
        self._error: str | None = None
        self._watcher: FolderWatcher | None = None
        self._mount_watcher: MountWatcher | None = None
        self._grant_watcher: ValueWatcher[dict[str, tuple[str, ...]] | None] | None = None
        self._mount_lines = LogThrottle(WATCH_TUNING.mount_line_every_s)
        self._closed = False
        self._stopping = False  # a stop was asked: a load under way ends now, nothing is announced
        self._loader: threading.Thread | None = None
        self._handover = threading.Lock()  # the kernel is closed by `close` or, made after it, by `_start`
        # source-id -> name of every capsule loaded so far: the broker names capsules by it
        self._names: dict[str, str] = {}
        self._gauges: list[Callable[[], None]] = []  # --metrics: what stops the gauges this runtime answers

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, *, background: bool = True) -> None:
        if background:
            self._loader = threading.Thread(target=self._start, name="astrid-load", daemon=True)
            self._loader.start()
        else:
            self._start()
            if self._error is not None:
                raise BackendNotReady(self._error)

    def _start(self) -> None:
        started = time.perf_counter()
        try:
            kernel = self._kernel_factory(self.config)
            with self._handover:
                if self._closed:  # closed while the kernel was made (a bus, `--workers`): it serves nothing
                    kernel.close()
                    return
                self.kernel = kernel
            if self._stopping:  # `stop_loading` came while the kernel was made: it compiles nothing
                stop_compiling(kernel)
            if hasattr(kernel, "loaded"):
                self._gauges.append(watch_kernel(kernel))
            self._gauges.append(metrics.watch("astrid_principals", metrics.one(lambda: len(self._clients))))
            self._ingress = MCP_SERVER.participant()
            self.broker = Broker(
                kernel.bus,
                participant=BROKER.participant(),
                limits=self.limits,
                authority=_namespace_authority(kernel, trust_store(self.config)),
                name_of=self._names.get,
                subscription_limits=self.config.subscription_limits,
                # A kernel's static replies, taken without a bus message each (a stand-in may have none).
                local_replies=getattr(kernel, "static_directory", NO_LOCAL_REPLIES),
            ).start()
            if self.principal is not None:
                self.client = self._new_client(self.principal)
            report = kernel.start()
            self._record(report, time.perf_counter() - started)
        except Exception as exc:  # reported to every request, and on stderr
            if self._stopping:  # cut short by the stop: nobody waits for this load any more
                log.debug("the kernel's start ended by the stop", exc_info=True)
            else:
                log.exception("the kernel failed to start")
            self._error = f"{type(exc).__name__}: {exc}"
        finally:
            self._ready.set()

    def _record(self, report: Iterable[Any], seconds: float) -> None:
        self.status = Status.of(report, seconds)
        for capsule in self.status.capsules:
            self._names[capsule.source_id] = capsule.name

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

    @property
    def stopping(self) -> bool:
        """A stop was asked (`stop_loading`, `close`): what loads from now on is not announced."""
        return self._stopping

    def stop_loading(self) -> None:
        """The server is stopping: a load under way ends now, a compile in progress is killed and
        none starts (its capsules are reported not loaded), a wait for capsule hosts ends. Safe in
        a signal handler: it takes no lock the main thread may hold."""
        self._stopping = True
        if self.kernel is not None:  # else `_start` sees the flag once the kernel is made
            stop_compiling(self.kernel)
        elif self.config.stop_joining is not None:
            self.config.stop_joining()

    def reload(self) -> Status:
        """Rescan the capsule folders (the kernel announces a changed set)."""
        self.wait_ready(600)
        assert self.kernel is not None  # ready means started
        started = time.perf_counter()
        report = self.kernel.reload()
        self._record(report, time.perf_counter() - started)
        return self.status

    def watch_folders(self, interval_s: float | None = None) -> FolderWatcher:
        """Hot reload: reload when a file under a capsule path changes (polled every `interval_s`,
        by default the config's `folder_poll_s`)."""
        if self._watcher is None:
            every = interval_s if interval_s is not None else self.config.folder_poll_s
            self._watcher = capsule_folder_watcher(self.config, self._on_folders_changed, every)
            self._watcher.start()
            if self.config.dev_sources is not None:
                # Dev mode: a save between the load and the watcher's baseline is in that baseline, so the
                # watcher never sees it change. One reload now serves it (nothing happens if nothing changed).
                self._on_folders_changed()
        return self._watcher

    def watch_mounts(self, interval_s: float = WATCH_TUNING.interval_s) -> MountWatcher:
        """Freshness of live data: a change under a folder granted as an fs mount
        re-announces the capsule set to the principals using it, so their
        resource lists are described again (and clients get list_changed when
        the URIs changed). Reads need no watch: they always see the file."""
        if self._mount_watcher is None:
            self.wait_ready(600)
            kernel = self.kernel
            assert kernel is not None  # ready means started
            self._mount_watcher = MountWatcher(
                kernel.mount_folders, self._on_mounts_changed, interval_s, on_files=self._on_files_changed
            )
            self._mount_watcher.start()
            # A grant or a revoke changes what capsules list, not what they are: announce, never reload.
            self._grant_watcher = ValueWatcher(self._grant_state, self._on_grants_changed, interval_s)
            self._grant_watcher.start()
        return self._mount_watcher

    def _on_mounts_changed(self, principals: frozenset[Principal]) -> None:
        if self.kernel is not None and not self._closed:
            folders = self._mount_watcher.last_changed if self._mount_watcher is not None else frozenset()
            skipped = self._mount_lines.ready()
            if skipped is not None:
                more = f" ({skipped} more changes since the last such line)" if skipped else ""
                shown = ", ".join(str(f) for f in sorted(folders)) or "a granted folder"
                events.info(
                    "files changed in %s; describing the resources again for %s%s",
                    shown,
                    _who(principals),
                    more,
                    extra={
                        "event": "mounts_changed",
                        "fields": {"folders": [str(f) for f in sorted(folders)], "users": len(principals)},
                    },
                )
            self.kernel.announce(principals)

    def _on_files_changed(self, paths: frozenset[str]) -> None:
        """Files changed under granted mounts: the resources whose reads touched them are updated
        (the kernel announces them; the broker checks and hands them to subscribed clients)."""
        files_changed = getattr(self.kernel, "files_changed", None)  # a test's stand-in kernel may have none
        if files_changed is not None and not self._closed:
            files_changed(paths)

    def _grant_state(self) -> dict[str, tuple[str, ...]] | None:
        """Each loaded capsule's grants as the operator typed them; None: the grants file cannot be read."""
        kernel = self.kernel
        granted = getattr(kernel, "granted", None)  # a test's stand-in kernel may have none
        if granted is None:
            return {}
        try:
            return {name: tuple(grants.specs()) for name, grants in granted().items()}
        except GrantError:  # said on every capsule call that needs a grant; here: nothing is granted
            return None

    def _on_grants_changed(
        self, before: dict[str, tuple[str, ...]] | None, after: dict[str, tuple[str, ...]] | None
    ) -> None:
        """The grants of a loaded capsule changed: every watched principal's lists are described again
        (a `{principal}` mount differs per principal; kv and http may change what a capsule lists)."""
        if self.kernel is None or self._closed:
            return
        if before is not None and after is not None:
            # a capsule loaded or unloaded is the reload's to announce; only grants of capsules in both count
            changes = [
                _grant_change(name, before[name], after[name])
                for name in sorted(before.keys() & after.keys())
                if before[name] != after[name]
            ]
            if not changes:
                return
            events.info(
                "grants changed: %s; describing the resources again",
                "; ".join(changes),
                extra={"event": "grants_changed", "fields": {"changes": changes}},
            )
        elif after is None:
            events.warning(
                "the grants file cannot be read: capsules get none of their grants until it is fixed",
                extra={"event": "grants_unreadable"},
            )
        else:
            events.info("the grants file reads again; describing the resources again", extra={"event": "grants_read"})
        self.kernel.announce()

    def _on_folders_changed(self) -> None:
        if not self.ready:
            return
        log.info("capsule folders changed; reloading")
        before = self.status
        report_reload(before, self.reload())

    def close(self) -> None:
        if self._closed:
            return
        self.stop_loading()
        with self._handover:
            self._closed = True
        loader = self._loader
        if loader is not None and self.kernel is not None:
            # a load cut short ends within milliseconds; bounded, as an in-process compile cannot be cut
            loader.join(LOAD_STOP_WAIT_S)
        if not self._ready.is_set():  # still making its kernel (`--workers`, a bus): who waits is let go
            self._error = "the server stopped before its capsules loaded"
            self._ready.set()
        for forget in self._gauges:
            forget()
        if self._watcher is not None:
            self._watcher.stop()
        if self._mount_watcher is not None:
            self._mount_watcher.stop()
        if self._grant_watcher is not None:
            self._grant_watcher.stop()
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

    def client_for(self, principal: str) -> BrokerClient:
        """The front doors as calls for `verified(principal)`; made on first use, then kept."""
        self.wait_ready(600)
        with self._clients_lock:
            client = self._clients.get(principal)
            if client is None:
                client = self._new_client(principal)
            return client

    def client_if_made(self, principal: str) -> BrokerClient | None:
        """The principal's client when `client_for` made it already and the capsules are loaded; never waits
        (an event loop asks). Before the load ends it is None: the default principal's client exists from the
        start, and a request it took then would find no capsule yet instead of waiting for them."""
        if not self.ready:
            return None
        return self._clients.get(principal)  # one dict read, atomic: no lock to wait on

    def _new_client(self, principal: str) -> BrokerClient:
        kernel, broker = self.kernel, self.broker
        assert kernel is not None and broker is not None  # started
        client = BrokerClient(broker, kernel.watch_principal(principal))
        self._clients[principal] = client
        return client

    def changes(self) -> EventStream[str]:
        """The principals whose capsule set changed, as it changes (close the stream when done)."""
        self.wait_ready(600)
        assert self.kernel is not None and self._ingress is not None
        subscription = self.kernel.bus.subscribe(self._ingress, CAPSULES_LOADED_TOPIC)
        stream = EventStream[str](on_close=subscription.close)

        def arrived() -> None:  # on the publisher's thread: quick, never raising
            for message in subscription.poll():
                if message.principal.is_verified and message.principal.name:
                    stream.put(message.principal.name)

        subscription.notify(arrived)
        return stream

    def updates(self) -> EventStream[tuple[str, str]]:
        """(principal, uri) of every resource update the broker checked, as they come (close it when done)."""
        self.wait_ready(600)
        assert self.broker is not None
        stream = EventStream[tuple[str, str]]()

        def updated(principal: Principal, uri: str) -> None:
            if principal.name is not None:
                stream.put((principal.name, uri))

        stream.on_close = self.broker.events.listen(updated)
        return stream

    def _default_client(self) -> BrokerClient:
        if self.principal is None:
            raise BackendNotReady("no default principal: this runtime serves only named principals")
        return self.client_for(self.principal)

    def list_resources(self, *, refresh: bool = False) -> list[ResourceDefinition]:
        """The default principal's resources (the CLI's view)."""
        return self._default_client().list_resources(refresh=refresh)

    def owners(self) -> dict[str, CapsuleSummary]:
        """uri -> the capsule serving it, for the default principal's resources (the CLI's view)."""
        if self.broker is None or self.principal is None:
            return {}
        return self._summaries(self.broker.listings.snapshot(Principal.verified(self.principal)).owners)

    def read_resource(self, uri: str) -> ReadOutcome:
        """A read as the default principal (the CLI's view), waited for."""
        return self._default_client().read(uri).result()

    def list_templates(self, *, refresh: bool = False) -> list[ResourceTemplate]:
        """The default principal's resource templates (the CLI's view)."""
        return self._default_client().list_templates(refresh=refresh)

    def template_owners(self) -> dict[str, CapsuleSummary]:
        """uri_template -> the capsule serving it, for the default principal's templates (the CLI's view)."""
        if self.broker is None or self.principal is None:
            return {}
        return self._summaries(self.broker.listings.template_snapshot(Principal.verified(self.principal)).owners)

    def complete(
        self, uri_template: str, argument: str, prefix: str, context: Mapping[str, str] | None = None
    ) -> CompletionOutcome:
        """A completion as the default principal (the CLI's view): values of `argument` starting with `prefix`."""
        return self._default_client().complete(uri_template, argument, prefix, dict(context or {}))

    def _summaries(self, owners: Mapping[str, str]) -> dict[str, CapsuleSummary]:
        """key -> the loaded capsule of its owning source-id (owners not loaded here are left out)."""
        by_source = {capsule.source_id: capsule for capsule in self.status.capsules}
        return {key: by_source[source] for key, source in owners.items() if source in by_source}


# -- what the server says while it runs (`astrid.events`) ---------------------------------


def _who(principals: Iterable[Principal]) -> str:
    names = sorted(p.name or str(p) for p in principals)
    if len(names) <= 3:
        return ", ".join(names) or "nobody"
    return f"{len(names)} users"


def _grant_change(name: str, before: tuple[str, ...], after: tuple[str, ...]) -> str:
    """`files: granted fs:files=/home/me/notes, revoked kv`."""
    granted = [spec for spec in after if spec not in before]
    revoked = [spec for spec in before if spec not in after]
    parts = ([f"granted {', '.join(granted)}"] if granted else []) + (
        [f"revoked {', '.join(revoked)}"] if revoked else []
    )
    return f"{name}: {', '.join(parts)}"


def capsule_folder_watcher(config: RuntimeConfig, on_change: Callable[[], None], interval_s: float) -> FolderWatcher:
    """Hot reload's watcher: the capsule paths, and the trust file (a publisher trusted or removed
    re-checks the installed capsules). Started by the caller."""
    files = [config.trust_file or default_trust_file()]
    return FolderWatcher(config.capsule_paths, on_change, interval_s, files=files)


def reloader(kernel: CapsuleKernel, status: Status) -> Callable[[], None]:
    """Hot reload's callback for a kernel with no runtime (`astrid host run`), on the watcher's
    thread: reload, and say what changed since the last reload (or `status`, the start)."""
    last = status

    def reload() -> None:
        nonlocal last
        after = Status.of(kernel.reload())
        report_reload(last, after)
        last = after

    return reload


def report_reload(before: Status, after: Status) -> None:
    """Say what a reload changed: each new (or newly different) failure, and one line for what is served."""
    reported = {(f.folder, f.error) for f in before.failures}
    for failure in after.failures:
        if (failure.folder, failure.error) not in reported:
            log.error("capsule %s not loaded: %s", failure.folder, failure.error)
    line = _reload_line({c.folder: c for c in before.capsules}, {c.folder: c for c in after.capsules})
    if line:
        names = [c.name for c in after.capsules]
        events.info("%s", line, extra={"event": "reload", "fields": {"serving": names}})


def _reload_line(before: Mapping[Path, CapsuleSummary], after: Mapping[Path, CapsuleSummary]) -> str | None:
    """`capsule folders changed: reloaded notes (a new build), loaded files, unloaded old; serving 3 capsules`,
    or None when what is served did not change."""
    changes = []
    for folder, capsule in sorted(after.items(), key=lambda item: item[1].name):
        old = before.get(folder)
        if old is None:
            changes.append(f"loaded {capsule.name}")
        elif old.source_id != capsule.source_id:
            changes.append(f"reloaded {capsule.name} ({'new sources, dev mode' if capsule.dev else 'a new build'})")
    for folder, capsule in sorted(before.items(), key=lambda item: item[1].name):
        if folder not in after:
            changes.append(f"unloaded {capsule.name}")
    if not changes:
        return None
    count = len(after)
    return f"capsule folders changed: {', '.join(changes)}; serving {count} capsule{'s' if count != 1 else ''}"


# -- a capsule folder checked as a server loads it (`astrid capsule list`) ----------------------


@dataclass(frozen=True)
class CapsuleCheck:
    """Who a capsule folder is, loaded as a server loads it (`CapsuleChecker.check`)."""

    source_id: str
    provenance: Provenance
    wasm_sha256: str
    grant_identity: str  # whom the operator's grants must name for the capsule to get them
    load_seconds: float
    from_cache: bool  # its compiled form came from the compile cache


class CapsuleChecker:
    """Does a capsule folder load, and who is it? Asked as a server asks it: with the compile cache and
    the trust vetter of a server on the same `cache_dir` and `trust_file` (None: the user's), made once
    for every folder checked."""

    def __init__(self, *, cache_dir: Path | None = None, trust_file: Path | None = None) -> None:
        # Imported here: wasmtime loads when a capsule is checked, not with the CLI.
        from astrid.host.kernel.compile_cache import CompileCache

        self._cache = CompileCache(cache_dir)
        self._vet = vetter(TrustStore(trust_file or default_trust_file()))

    def check(self, folder: Path) -> CapsuleCheck:
        """Who the capsule in `folder` is; raises `CapsuleLoadError` (one line: why) when it does not load."""
        from astrid.host.kernel.loader import load_capsule

        loaded = load_capsule(folder, self._cache, self._vet)
        return CapsuleCheck(
            source_id=loaded.source_id,
            provenance=loaded.provenance,
            wasm_sha256=loaded.wasm_sha256,
            grant_identity=loaded.grant_identity,
            load_seconds=loaded.load_seconds,
            from_cache=loaded.from_cache,
        )
