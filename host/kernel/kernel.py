"""The kernel facade: load capsules, bind their handlers, run them per principal.

    kernel = Kernel(KernelConfig(capsule_paths=[...]))
    kernel.start()                      # loads every capsule it finds
    client = kernel.attach_host("x", publish=[...], subscribe=[...])
    kernel.bus.publish(client, topic, payload, Principal.verified("alice"))
    kernel.reload()                     # rescan folders after a change
    kernel.close()

Each capsule folder has one record: a `CapsuleSlot` while its capsule is
served (the capsule, its bus participant, its load result and the files'
fingerprint when it was loaded), or a `FailedSlot` while it fails to load.
A folder whose files are untouched keeps its record on reload: nothing is
re-read, re-hashed or recompiled for it.

`files_changed(paths)` is told which files changed under the granted mounts;
every resource whose last read touched one of them (`file_tracking`) is
announced on `resource.v1.event.updated`, as its capsule, for the principal
it was read for: the broker checks it as it checks a capsule's own.

A capsule whose describe (or templates) reply is the same for every
principal is not called for it: its build recorded the reply
(`static_replies`; a build without a record is asked once) and the kernel
answers the request itself, as the capsule.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from astrid.host.bus import (
    Binding,
    BusError,
    Dispatcher,
    InMemoryBus,
    Message,
    Participant,
    Principal,
    host_participant,
)
from astrid.host.bus.topics import is_clean_segment
from astrid.host.capabilities.grants import CapsuleGrants, GrantStore
from astrid.host.capabilities.plugins.fs import FS, mount_folder
from astrid.host.capabilities.plugins.kv import KV
from astrid.host.capsule.discovery import discover_capsules
from astrid.host.capsule.manifest import MANIFEST_NAME, ManifestError, load_manifest
from astrid.host.capsule.provenance import IDENTITY_FILE, Provenance, Vet
from astrid.host.capsule.sources import DevSources
from astrid.host.contract.bus_asks import bus_asks
from astrid.host.contract.events import CapsuleInfo, CapsulesLoaded, ResourceUpdated
from astrid.host.contract.local_replies import LocalKind, LocalReply
from astrid.host.contract.topics import (
    CAPSULES_LOADED_TOPIC,
    FILE_WATCH,
    INVENTORY_REPLY_PREFIX,
    INVENTORY_REQUEST,
    KERNEL,
    RESOURCE_UPDATED_TOPIC,
)
from astrid.host.errors import GrantError
from astrid.host.kernel.abi import HostAbi
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.dev import load_dev_capsule
from astrid.host.kernel.dispatch import PoolDispatcher
from astrid.host.kernel.engine import WasmEngine, shared_engine, wasmtime_version
from astrid.host.kernel.failed_reads import failed_read_reply
from astrid.host.kernel.loader import CapsuleLoadError, LoadedCapsule, load_capsule
from astrid.host.kernel.reserved import CapsuleParticipant, refusal_line
from astrid.host.kernel.routing import accepts_for
from astrid.host.kernel.sandbox import SandboxPool
from astrid.host.kernel.static_directory import StaticDirectory
from astrid.host.kernel.static_replies import DYNAMIC, STATIC_KINDS, StaticReplies, StaticReply, StaticReplyStore
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.settings import default_grants_file, default_kv_file
from astrid.host.tuning import KERNEL_TUNING
from astrid.host.version import astrid_version

log = logging.getLogger(__name__)


@dataclass
class KernelConfig:
    capsule_paths: list[Path] = field(default_factory=list)
    cache_dir: Path | None = None
    limits: Limits = DEFAULT_LIMITS
    max_instances: int = KERNEL_TUNING.max_instances  # live sandboxes, over all (capsule, principal) pairs (LRU)
    # What the operator granted capsules, and where kv state lives (docs/capabilities.md);
    # None: the user's files (settings.default_grants_file, settings.data_dir).
    grants_file: Path | None = None
    kv_file: Path | None = None
    # The bus, given the kernel's dispatcher and the payload cap; None: an InMemoryBus
    # (a NatsBus joins other hosts: docs/nats.md).
    bus_factory: Callable[[Dispatcher, int], InMemoryBus] | None = None
    # The kv store, given the bus; None: the SQLite file (`kv_file`). On NATS: shared state (docs/nats.md).
    kv_factory: Callable[[InMemoryBus], object] | None = None
    # Who a capsule folder is (its signature checked against the trust store) before it is
    # loaded; None: every capsule is local and unsigned. `vet_epoch` changes whenever the
    # answer may (the trust file changed): every folder is then checked again on reload.
    vet: Vet | None = None
    vet_epoch: Callable[[], object] | None = None
    # Answer a capsule's describe (templates) request without calling it when its reply is
    # the same for every principal (static_replies); False: always call the capsule.
    static_replies: bool = True
    # Dev mode (`astrid capsule dev`, kernel/dev.py): the sources a folder is served from instead of its
    # component, as last accepted (None: not a dev folder; CapsuleLoadError: none accepted yet, and why).
    dev_sources: Callable[[Path], DevSources | None] | None = None


@dataclass(frozen=True)
class LoadResult:
    folder: Path
    name: str
    ok: bool
    error: str | None = None
    source_id: str | None = None
    seconds: float = 0.0
    from_cache: bool = False
    provenance: Provenance | None = None  # who it is (publisher or local), once loaded
    digest: str | None = None  # sha256:<hex> of its component (dev mode: of its sources)
    dev: bool = False  # served in dev mode: the runner with the folder's sources


# What a rebuild, an edit or a chmod changes in a capsule folder (see `_fingerprint`).
Fingerprint = tuple


@dataclass(frozen=True)
class CapsuleSlot:
    """A served capsule folder: the capsule, the participant its handlers are bound as,
    its load result, and the folder's fingerprint taken just before it was loaded."""

    capsule: LoadedCapsule
    participant: Participant
    result: LoadResult
    fingerprint: Fingerprint


@dataclass(frozen=True)
class FailedSlot:
    """A folder whose capsule failed to load, with the files as they were: it is
    tried again only once they change (a broken 30 MB component is not
    recompiled on every unrelated reload)."""

    fingerprint: Fingerprint
    result: LoadResult


class Kernel:
    def __init__(self, config: KernelConfig | None = None, engine: WasmEngine | None = None) -> None:
        self.config = config or KernelConfig()
        self.limits = self.config.limits
        self.wasm = engine or shared_engine()
        self.cache = CompileCache(self.config.cache_dir, self.wasm)
        self.dispatcher = PoolDispatcher()
        make_bus = self.config.bus_factory or (lambda dispatcher, cap: InMemoryBus(dispatcher, max_payload_bytes=cap))
        self.bus = make_bus(self.dispatcher, self.limits.bus_message_bytes)
        self.grants = GrantStore(self.config.grants_file or default_grants_file())
        kv_factory = self.config.kv_factory
        self.abi = HostAbi(
            self.wasm.engine,
            self.bus,
            self.grants,
            self.config.kv_file or default_kv_file(),
            kv_factory=(lambda: kv_factory(self.bus)) if kv_factory is not None else None,
            memory_limit_bytes=self.limits.capsule_memory_bytes,
        )
        self.sandboxes = SandboxPool(self.wasm, self.abi, self.limits, self.config.max_instances)
        # Each build's describe/templates replies when they are the same for every principal.
        self.static_replies = StaticReplyStore(self.cache, self.limits)
        # Those replies, for a broker beside the kernel to take without a bus message each.
        self.static_directory = StaticDirectory()
        self.capsules: dict[Path, CapsuleSlot] = {}  # by folder; a folder is in at most one of these two
        self._provenance: dict[str, Provenance] = {}  # who each served capsule is, by source-id
        self._failures: dict[Path, FailedSlot] = {}
        self.load_report: list[LoadResult] = []
        self.principals: set[Principal] = set()
        # Told after a reload changed the capsule set (on NATS: the host beats at once).
        self.set_changed: Callable[[], None] = lambda: None
        self._lock = threading.RLock()
        self.participant = KERNEL.participant()
        self._file_watch: dict[str, Participant] = {}  # by capsule source-id: announces for it
        self.bus.bind(Binding(self.participant, INVENTORY_REQUEST, self._answer_inventory, inline=True))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> list[LoadResult]:
        results = self.reload()
        if self.config.kv_factory is not None and any(
            slot.capsule.manifest.capabilities.of(KV) for slot in self.capsules.values()
        ):
            self.abi.capabilities.prepare()  # shared kv: its bucket is ready before the first call
        return results

    def close(self) -> None:
        self.sandboxes.close()
        self.dispatcher.close()
        self.abi.capabilities.close()
        self.bus.close()

    def attach_host(self, name: str, publish: Iterable[str] = (), subscribe: Iterable[str] = ()) -> Participant:
        """A host-native participant (broker, MCP server, test client) with its own source-id."""
        return host_participant(name, f"{name}-{uuid.uuid4().hex}", publish, subscribe)

    def watch_principal(self, name: str) -> Principal:
        """Announce capsule-set changes to `name` (as verified) from now on,
        and keep its sandboxes instantiated ahead of its first request."""
        principal = Principal.verified(name)
        with self._lock:
            self.principals.add(principal)
            served = list(self.capsules.values())
        self._prewarm(served, [principal])
        return principal

    def _prewarm(self, slots: list[CapsuleSlot], principals: list[Principal]) -> None:
        for slot in slots:
            for principal in principals:
                self.dispatcher.background(self.sandboxes.prewarm, slot.capsule, slot.participant, principal)

    # -- loading -----------------------------------------------------------------

    def reload(self) -> list[LoadResult]:
        """Rescan the capsule paths; load new or rebuilt capsules, unload removed ones.

        A capsule whose manifest and component are untouched (same size,
        times and inode) is kept as is, and so is a failure to load one; the
        others load in parallel (hashing and reading release the GIL).
        Publishes `astrid.v1.capsules_loaded` for every watched principal
        when the set changed.
        """
        with self._lock:
            folders = discover_capsules(self.config.capsule_paths)
            changed = self._forget_removed(folders)
            kept = self._untouched(folders)
            # Fingerprints are taken before loading: a rebuild that lands
            # during the load differs from them and is loaded next time.
            marks = {f: self._mark(f, _component_path(f)) for f in folders if f not in kept}
            loads = self._load_all(list(marks))
            # A capsule's name is its identity (logs, health, source-id): the
            # first folder in scan order keeps it, a second one is refused.
            names = {self.capsules[f].capsule.name: f for f in kept if f in self.capsules}
            report: list[LoadResult] = []
            for folder in folders:
                if folder in kept:
                    report.append(kept[folder])
                    continue
                loaded = loads[folder]
                if isinstance(loaded, CapsuleLoadError):
                    result, did_change = self._fail(folder, loaded, marks[folder])
                elif names.setdefault(loaded.name, folder) != folder:
                    refusal = CapsuleLoadError(
                        f"{loaded.name}: a capsule of that name is already served from {names[loaded.name]}; "
                        f"give this one another [package] name"
                    )
                    # Not remembered: it depends on the other folder, not on these files.
                    result, did_change = self._fail(folder, refusal, marks[folder], remember=False)
                else:
                    result, did_change = self._serve(folder, loaded, marks[folder])
                report.append(result)
                changed = changed or did_change
            self.load_report = report
            self.static_replies.retain(slot.capsule.wasm_sha256 for slot in self.capsules.values())
            fresh = [s for s in self.capsules.values() if self.sandboxes.live_instances(s.capsule.source_id) == 0]
            principals = sorted(self.principals, key=str)
        self._prewarm(fresh, principals)
        if changed:
            self.announce()
            self.set_changed()
        return report

    def _forget_removed(self, folders: list[Path]) -> bool:
        """Unload the capsules of folders that are gone and forget their failures; True if one was unloaded."""
        gone = [folder for folder in self.capsules if folder not in folders]
        for folder in gone:
            self._unload(folder)
        for folder in [folder for folder in self._failures if folder not in folders]:
            del self._failures[folder]
        return bool(gone)

    def _untouched(self, folders: list[Path]) -> dict[Path, LoadResult]:
        """The last result of every folder whose files have not changed since it loaded, or failed to."""
        kept: dict[Path, LoadResult] = {}
        for folder in folders:
            slot = self.capsules.get(folder)
            if slot is not None:
                if slot.fingerprint == self._mark(folder, slot.capsule.wasm_path):
                    kept[folder] = slot.result
                continue
            failed = self._failures.get(folder)
            if failed is not None and failed.fingerprint == self._mark(folder, _component_path(folder)):
                kept[folder] = failed.result
        return kept

    def _mark(self, folder: Path, wasm_path: Path | None) -> Fingerprint:
        """The folder's files as they are, and the trust they were vetted under (dev: its accepted sources)."""
        epoch = self.config.vet_epoch() if self.config.vet_epoch is not None else None
        try:
            dev = self._dev_sources(folder)
        except CapsuleLoadError as exc:
            return ("dev", None, str(exc))
        if dev is not None:
            return ("dev", dev.digest)
        return (*_fingerprint(folder, wasm_path), epoch)

    def _dev_sources(self, folder: Path) -> DevSources | None:
        return self.config.dev_sources(folder) if self.config.dev_sources is not None else None

    def _load_all(self, folders: list[Path]) -> dict[Path, LoadedCapsule | CapsuleLoadError]:
        def load(folder: Path) -> LoadedCapsule | CapsuleLoadError:
            try:
                dev = self._dev_sources(folder)
                if dev is not None:
                    return load_dev_capsule(folder, self.cache, dev)
                capsule = load_capsule(folder, self.cache, self.config.vet)
            except CapsuleLoadError as exc:
                return exc
            self._static_replies_of(capsule)  # learnt here, in parallel (a build not asked yet); kept for binding
            return capsule

        if len(folders) <= 1:
            return {folder: load(folder) for folder in folders}
        with ThreadPoolExecutor(
            min(KERNEL_TUNING.load_workers, len(folders)), thread_name_prefix="astrid-load"
        ) as pool:
            return dict(zip(folders, pool.map(load, folders), strict=True))

    def _fail(
        self, folder: Path, error: CapsuleLoadError, mark: Fingerprint, *, remember: bool = True
    ) -> tuple[LoadResult, bool]:
        """Record that `folder` did not load; True when that unloaded what it served."""
        # Its caller reports it to the user (serve, `capsule list`); this is the log's copy.
        log.info("capsule %s not loaded: %s", folder.name, error)
        served = folder in self.capsules
        if served:  # keep serving nothing stale: unload the old build
            self._unload(folder)
        result = LoadResult(folder, folder.name, False, str(error))
        if remember:
            self._failures[folder] = FailedSlot(mark, result)
        else:
            self._failures.pop(folder, None)
        return result, served

    def _serve(self, folder: Path, capsule: LoadedCapsule, mark: Fingerprint) -> tuple[LoadResult, bool]:
        """Serve a freshly loaded capsule from `folder`; True when that changed what is served."""
        self._failures.pop(folder, None)
        result = LoadResult(
            folder,
            capsule.name,
            True,
            None,
            capsule.source_id,
            capsule.load_seconds,
            capsule.from_cache,
            capsule.provenance,
            f"sha256:{capsule.dev.digest if capsule.dev is not None else capsule.wasm_sha256}",
            capsule.dev is not None,
        )
        current = self.capsules.get(folder)
        if current is not None and _same_build(current.capsule, capsule):
            # Touched, not changed: keep its bindings and sandboxes (who it is may have been re-checked).
            kept = replace(current.capsule, provenance=capsule.provenance)
            self.capsules[folder] = replace(current, capsule=kept, result=result, fingerprint=mark)
            self._provenance[capsule.source_id] = capsule.provenance
            return result, False
        participant = self._bind_handlers(capsule, replacing=current.capsule if current is not None else None)
        self.capsules[folder] = CapsuleSlot(capsule, participant, result, mark)
        self._provenance[capsule.source_id] = capsule.provenance
        if current is not None:
            self.sandboxes.drop_capsule(current.capsule.source_id)
            self._forget_reads(current.capsule.source_id)
            log.info("replaced capsule %s (%s)", current.capsule.name, current.capsule.source_id)
        log.info(
            "loaded capsule %s (%s) in %.1f ms%s",
            capsule.name,
            capsule.source_id,
            capsule.load_seconds * 1000,
            " from the compile cache" if capsule.from_cache else " (compiled)",
        )
        self._report_bus_asks(capsule, participant)
        self._adopt_grants(capsule)
        return result, True

    def _adopt_grants(self, capsule: LoadedCapsule) -> None:
        """Grants made before they were bound to a capsule's identity go to this one, once, and say so."""
        try:
            adopted = self.grants.adopt(capsule.name, capsule.grant_identity)
        except GrantError as exc:
            log.error("the grants of %s cannot be bound to it: %s", capsule.name, exc)
            return
        if adopted:
            log.warning(
                "the grants of %s (made before grants were bound to a capsule's identity, or before it was found) "
                "now belong to the capsule at %s (%s) only; `astrid capsule list -v` shows them",
                capsule.name,
                capsule.folder,
                capsule.provenance.label(),
            )

    @staticmethod
    def _report_bus_asks(capsule: LoadedCapsule, participant: CapsuleParticipant) -> None:
        """Say once, at load, what the manifest declares that stays refused without
        `bus:request` (the checks themselves run on every call: a later grant works)."""
        asks = bus_asks(capsule.manifest.publish, capsule.manifest.subscribe)
        if asks and not participant.bus_request_granted():
            log.warning("%s", refusal_line(capsule.name, asks))

    def _bind_handlers(self, capsule: LoadedCapsule, replacing: LoadedCapsule | None = None) -> CapsuleParticipant:
        """Bind a capsule's handlers as a new participant; a rebuild's take its old build's place in one step."""
        manifest = capsule.manifest
        participant = CapsuleParticipant(
            source_id=capsule.source_id,
            name=capsule.name,
            publish_acl=tuple(manifest.publish),
            subscribe_acl=tuple(manifest.subscribe),
            bus_request_granted=self._bus_request_check(capsule),
        )
        statics = self._static_replies_of(capsule)
        bindings = []
        listed: dict[LocalKind, LocalReply] = {}  # what a broker beside us takes without a bus message
        for pattern, handler in manifest.handlers().items():
            static = statics.for_binding(pattern, handler)
            if static is not None:
                accepts = accepts_for(capsule, pattern)
                if participant.may_publish(static.topic):  # else refused on the bus, as the guest's would be
                    listed[STATIC_KINDS[handler]] = LocalReply(capsule.source_id, static.payload, static.data)
                    accepts = _unless_read_directly(accepts, self.static_directory)
                # Answered by the host, as the capsule, in the publisher's thread: no sandbox, no guest call.
                bindings.append(
                    Binding(
                        participant,
                        pattern,
                        self._static_handler(capsule, participant, handler, static),
                        accepts=accepts,
                        inline=True,
                    )
                )
                continue
            bindings.append(
                Binding(
                    participant,
                    pattern,
                    self._capsule_handler(capsule, participant, handler),
                    accepts=accepts_for(capsule, pattern),
                    is_capsule=True,
                )
            )
        replaced = replacing.source_id if replacing is not None else None
        self.static_directory.put(capsule.source_id, listed, replacing=replaced)
        self.bus.bind_all(bindings, replacing=replaced)
        return participant

    def _static_replies_of(self, capsule: LoadedCapsule) -> StaticReplies:
        """The build's static replies (recorded at build, else asked once); DYNAMIC if learning them failed."""
        if not self.config.static_replies or capsule.dev is not None:  # dev: the runner's record fits no version
            return DYNAMIC
        try:
            return self.static_replies.replies_for(capsule)
        except Exception as exc:  # never fail a load over an optimisation: the capsule answers itself
            log.warning("capsule %s: its static replies are not used: %s", capsule.name, exc)
            return DYNAMIC

    def _static_handler(
        self, capsule: LoadedCapsule, participant: Participant, handler: str, reply: StaticReply
    ) -> Callable[[Message], None]:
        """Publish the capsule's static reply as the capsule, for the requesting principal, as its SDK would."""
        stats = self.static_replies.stats

        def answer(message: Message) -> None:
            if not message.principal.is_verified:
                return  # the SDK lists nothing for anyone else (docs/contract/resources.md §5.5)
            try:
                self.bus.publish(participant, reply.topic, reply.payload, message.principal, parsed=reply.data)
            except BusError as exc:  # refused as the guest's publish would have been (and logged alike)
                log.debug("capsule %s: its %s reply was refused: %s", capsule.name, handler, exc)
                return
            stats.answered += 1

        return answer

    def _bus_request_check(self, capsule: LoadedCapsule) -> Callable[[], bool]:
        """Has the operator granted this capsule `bus:request`, as the grants file says now?"""

        def granted() -> bool:
            try:
                return self.grants.for_capsule(capsule.name, capsule.grant_identity).bus_request
            except GrantError:  # a corrupt or loose grants file grants nothing
                return False

        return granted

    def _capsule_handler(self, capsule: LoadedCapsule, participant: Participant, handler: str):
        def run(message: Message) -> None:
            outcome = self.sandboxes.invoke(capsule, participant, message, handler)
            if outcome.ok:
                log.debug("%s.%s -> %s (%.2f ms)", capsule.name, handler, outcome.action, outcome.seconds * 1000)
                return
            reply = failed_read_reply(capsule.name, message, outcome, handler, self.limits.call_wall_time_s)
            if reply is not None:
                try:
                    self.bus.publish(participant, *reply, message.principal)
                except BusError as exc:  # refused as the guest's own reply would have been
                    log.debug("capsule %s: the reply for its failed read was refused: %s", capsule.name, exc)

        return run

    def _unload(self, folder: Path) -> None:
        capsule = self.capsules.pop(folder).capsule
        self._provenance.pop(capsule.source_id, None)
        self.static_directory.drop(capsule.source_id)
        self.bus.unbind_owner(capsule.source_id)
        self.sandboxes.drop_capsule(capsule.source_id)
        self._forget_reads(capsule.source_id)
        log.info("unloaded capsule %s (%s)", capsule.name, capsule.source_id)

    def _forget_reads(self, source_id: str) -> None:
        self.abi.capabilities.reads.forget(source_id)
        self._file_watch.pop(source_id, None)

    def loaded(self) -> list[LoadedCapsule]:
        with self._lock:
            return sorted((slot.capsule for slot in self.capsules.values()), key=lambda c: c.name)

    def provenance_of(self, source_id: str) -> Provenance | None:
        """Who the capsule with `source_id` is; None when no capsule here has it (another host's)."""
        return self._provenance.get(source_id)

    # -- events and host services ---------------------------------------------------

    def inventory(self, principal: Principal) -> CapsulesLoaded:
        return CapsulesLoaded(
            capsules=[
                CapsuleInfo(
                    name=c.name,
                    version=c.manifest.package.version,
                    description=c.manifest.package.description,
                    source_id=c.source_id,
                    principal=principal.name,
                )
                for c in self.loaded()
            ]
        )

    def announce(self, principals: Iterable[Principal] | None = None) -> None:
        """Publish the capsule inventory to `principals` (default: every watched principal)."""
        with self._lock:
            chosen = sorted(self.principals if principals is None else principals, key=str)
        for principal in chosen:
            try:
                inventory = self.inventory(principal).to_json()
                self.bus.publish(self.participant, CAPSULES_LOADED_TOPIC, inventory, principal)
            except BusError as exc:
                log.error("cannot announce the capsule set to %s: %s", principal, exc)

    def granted(self) -> dict[str, CapsuleGrants]:
        """What each loaded capsule is granted now, by name: what a grant or a revoke
        changes (`astrid capsule grant`), polled by the runtime to announce it.
        One `stat` of the grants file while it is unchanged."""
        return {c.name: self.grants.for_capsule(c.name, c.grant_identity) for c in self.loaded()}

    def mount_folders(self) -> dict[Path, frozenset[Principal]]:
        """The folders loaded capsules may read as fs mounts now, each with the
        watched principals it is granted for (what the mount watcher polls)."""
        folders: dict[Path, set[Principal]] = {}
        with self._lock:
            principals = list(self.principals)
        for capsule in self.loaded():
            asked = capsule.manifest.capabilities.of(FS)
            if not asked:
                continue
            granted = FS.usable(self.grants.for_capsule(capsule.name, capsule.grant_identity).of(FS), asked)
            for _, template in granted:
                for principal in principals:
                    folder = mount_folder(template, principal.name if principal.is_verified else None)
                    if folder is not None:
                        folders.setdefault(folder, set()).add(principal)
        return {folder: frozenset(users) for folder, users in folders.items()}

    def files_changed(self, paths: Iterable[str]) -> int:
        """Files under granted mounts changed: announce every resource whose last read touched one,
        to the principal it was read for (as its capsule). How many were announced."""
        announced = 0
        for key in self.abi.capabilities.reads.touched(paths):
            with self._lock:
                loaded = key.source_id in self._provenance
                if loaded and key.source_id not in self._file_watch:
                    self._file_watch[key.source_id] = FILE_WATCH.participant(key.source_id)
                speaker = self._file_watch.get(key.source_id)
            if not loaded or speaker is None:
                continue
            try:
                self.bus.publish(speaker, RESOURCE_UPDATED_TOPIC, ResourceUpdated(uri=key.uri).to_json(), key.principal)
                announced += 1
            except BusError as exc:
                log.warning("cannot announce that %s changed for %s: %s", key.uri, key.principal, exc)
        return announced

    def read_folders(self) -> dict[Path, frozenset[Principal]]:
        """The mount folders resource reads looked under (what a host whose principals are not
        watched polls for `files_changed`: `astrid host run`)."""
        return {Path(root): frozenset() for root in self.abi.capabilities.reads.roots()}

    def _answer_inventory(self, message: Message) -> None:
        try:
            correlation = json.loads(message.payload).get("correlation_id")
        except (ValueError, AttributeError):
            return
        if not is_clean_segment(correlation):
            return
        reply = self.inventory(message.principal).to_wire()
        reply["host"] = {
            "astrid_version": astrid_version(),
            "wasmtime_version": wasmtime_version(),
            "limits": asdict(self.limits),
        }
        self.bus.publish(self.participant, INVENTORY_REPLY_PREFIX + correlation, json.dumps(reply), message.principal)


def _unless_read_directly(accepts: Callable[[Message], bool], directory: StaticDirectory) -> Callable[[Message], bool]:
    """`accepts`, but never a request of a broker that takes the static replies from `directory`."""
    return lambda message: directory.answers_on_bus(message) and accepts(message)


def _fingerprint(folder: Path, wasm_path: Path | None) -> tuple:
    """What a rebuild, an edit, a reinstall or a chmod changes: size, times and inode of the
    manifest, the component and the identity file."""
    marks = []
    for path in (folder / MANIFEST_NAME, wasm_path, folder / IDENTITY_FILE):
        try:
            stat = path.stat() if path is not None else None
        except OSError:
            stat = None
        marks.append(stat and (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino))
    return tuple(marks)


def _same_build(old: LoadedCapsule, new: LoadedCapsule) -> bool:
    """The same component (source-id) under the same manifest: serving `new` would change nothing."""
    return old.source_id == new.source_id and old.manifest == new.manifest


def _component_path(folder: Path) -> Path | None:
    """The component the folder's manifest names, if the manifest reads."""
    try:
        return folder / load_manifest(folder).component_file
    except ManifestError:
        return None
