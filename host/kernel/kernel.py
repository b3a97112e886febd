"""The kernel facade: load capsules, bind their handlers, run them per principal.

    kernel = Kernel(KernelConfig(capsule_paths=[...]))
    kernel.start()                      # loads every capsule it finds
    client = kernel.attach_host("x", publish=[...], subscribe=[...])
    kernel.bus.publish(client, topic, payload, Principal.verified("alice"))
    kernel.reload()                     # rescan folders after a change
    kernel.close()
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from astrid.host.contract.events import CAPSULES_LOADED_TOPIC, CapsuleInfo, CapsulesLoaded
from astrid.host.kernel.abi import HostAbi
from astrid.host.kernel.bus import Binding, Bus, BusError, Message, Participant, Principal, host_participant
from astrid.host.kernel.compile_cache import CompileCache
from astrid.host.kernel.dispatch import PoolDispatcher
from astrid.host.kernel.engine import WasmEngine, shared_engine, wasmtime_version
from astrid.host.kernel.loader import CapsuleLoadError, LoadedCapsule, discover_capsules, load_capsule
from astrid.host.kernel.manifest import MANIFEST_NAME, ManifestError, load_manifest
from astrid.host.kernel.reserved import CapsuleParticipant
from astrid.host.kernel.routing import accepts_for
from astrid.host.kernel.sandbox import SandboxPool
from astrid.host.limits import DEFAULT_LIMITS, Limits
from astrid.host.topics import is_clean_segment
from astrid.host.version import astrid_version

log = logging.getLogger(__name__)

INVENTORY_REQUEST = "astrid.v1.request.capsules"
LOAD_WORKERS = 4
INVENTORY_REPLY_PREFIX = "astrid.v1.response.capsules."


@dataclass
class KernelConfig:
    capsule_paths: list[Path] = field(default_factory=list)
    cache_dir: Path | None = None
    limits: Limits = DEFAULT_LIMITS
    max_instances: int = 256


@dataclass(frozen=True)
class LoadResult:
    folder: Path
    name: str
    ok: bool
    error: str | None = None
    source_id: str | None = None
    seconds: float = 0.0
    from_cache: bool = False


class Kernel:
    def __init__(self, config: KernelConfig | None = None, engine: WasmEngine | None = None) -> None:
        self.config = config or KernelConfig()
        self.limits = self.config.limits
        self.wasm = engine or shared_engine()
        self.cache = CompileCache(self.config.cache_dir, self.wasm)
        self.dispatcher = PoolDispatcher()
        self.bus = Bus(self.dispatcher, max_payload_bytes=self.limits.bus_message_bytes)
        self.abi = HostAbi(self.wasm.engine, self.bus)
        self.sandboxes = SandboxPool(self.wasm, self.abi, self.limits, self.config.max_instances)
        self.capsules: dict[Path, tuple[LoadedCapsule, Participant]] = {}
        self.load_report: list[LoadResult] = []
        self._results: dict[Path, LoadResult] = {}
        self._fingerprints: dict[Path, tuple] = {}
        # A capsule that failed to load, with the files as they were: it is
        # tried again only once they change (a broken 30 MB component is not
        # recompiled on every unrelated reload).
        self._failures: dict[Path, tuple[tuple, LoadResult]] = {}
        self.principals: set[Principal] = set()
        self._lock = threading.RLock()
        self.participant = host_participant(
            "kernel",
            f"kernel-{uuid.uuid4().hex}",
            publish=[CAPSULES_LOADED_TOPIC, INVENTORY_REPLY_PREFIX + "*"],
            subscribe=[INVENTORY_REQUEST],
        )
        self.bus.bind(Binding(self.participant, INVENTORY_REQUEST, self._answer_inventory, inline=True))

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> list[LoadResult]:
        return self.reload()

    def close(self) -> None:
        self.sandboxes.close()
        self.dispatcher.close()

    def attach_host(self, name: str, publish: list[str] = (), subscribe: list[str] = ()) -> Participant:  # type: ignore[assignment]
        """A host-native participant (broker, MCP server, test client) with its own source-id."""
        return host_participant(name, f"{name}-{uuid.uuid4().hex}", publish, subscribe)

    def watch_principal(self, name: str) -> Principal:
        """Announce capsule-set changes to `name` (as verified) from now on,
        and keep its sandboxes instantiated ahead of its first request."""
        principal = Principal.verified(name)
        with self._lock:
            self.principals.add(principal)
            installed = list(self.capsules.values())
        self._prewarm(installed, [principal])
        return principal

    def _prewarm(self, installed: list[tuple[LoadedCapsule, Participant]], principals: list[Principal]) -> None:
        for capsule, participant in installed:
            for principal in principals:
                self.dispatcher.background(self.sandboxes.prewarm, capsule, participant, principal)

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
            changed = False
            for folder in list(self.capsules):
                if folder not in folders:
                    self._unload(folder)
                    changed = True
            for folder in list(self._failures):
                if folder not in folders:
                    del self._failures[folder]
            kept = {f: self._results[f] for f in folders if f in self.capsules and self._unchanged(f)}
            kept |= {f: self._failures[f][1] for f in folders if f not in self.capsules and self._still_failing(f)}
            # Fingerprints are taken before loading: a rebuild that lands
            # during the load differs from them and is loaded next time.
            marks = {f: _fingerprint(f, _component_path(f)) for f in folders if f not in kept}
            loads = self._load_all(list(marks))
            # A capsule's name is its identity (logs, health, source-id): the
            # first folder in scan order keeps it, a second one is refused.
            names = {self.capsules[f][0].name: f for f in kept if f in self.capsules}
            report: list[LoadResult] = []
            for folder in folders:
                if folder in kept:
                    report.append(kept[folder])
                    continue
                loaded, remember = loads[folder], True
                if isinstance(loaded, LoadedCapsule) and names.setdefault(loaded.name, folder) != folder:
                    loaded = CapsuleLoadError(
                        f"{loaded.name}: a capsule of that name is already served from {names[loaded.name]}; "
                        f"give this one another [package] name"
                    )
                    remember = False  # it depends on the other folder, not on these files
                result, did_change = self._apply(folder, loaded, marks[folder], remember=remember)
                report.append(result)
                changed = changed or did_change
            self.load_report = report
            fresh = [entry for entry in self.capsules.values() if self.sandboxes.live_instances(entry[0].source_id) == 0]
            principals = sorted(self.principals, key=str)
        self._prewarm(fresh, principals)
        if changed:
            self.announce()
        return report

    def _load_all(self, folders: list[Path]) -> dict[Path, LoadedCapsule | CapsuleLoadError]:
        def load(folder: Path) -> LoadedCapsule | CapsuleLoadError:
            try:
                return load_capsule(folder, self.cache)
            except CapsuleLoadError as exc:
                return exc

        if len(folders) <= 1:
            return {folder: load(folder) for folder in folders}
        with ThreadPoolExecutor(min(LOAD_WORKERS, len(folders)), thread_name_prefix="astrid-load") as pool:
            return dict(zip(folders, pool.map(load, folders)))

    def _unchanged(self, folder: Path) -> bool:
        capsule, _ = self.capsules[folder]
        return self._fingerprints.get(folder) == _fingerprint(folder, capsule.wasm_path)

    def _still_failing(self, folder: Path) -> bool:
        failure = self._failures.get(folder)
        return failure is not None and failure[0] == _fingerprint(folder, _component_path(folder))

    def _apply(
        self, folder: Path, loaded: LoadedCapsule | CapsuleLoadError, mark: tuple, *, remember: bool = True
    ) -> tuple[LoadResult, bool]:
        current = self.capsules.get(folder)
        if isinstance(loaded, CapsuleLoadError):
            # Its caller reports it to the user (serve, `capsule list`); this is the log's copy.
            log.info("capsule %s not loaded: %s", folder.name, loaded)
            if current is not None:  # keep serving nothing stale: unload the old build
                self._unload(folder)
            result = LoadResult(folder, folder.name, False, str(loaded))
            if remember:
                self._failures[folder] = (mark, result)
            else:
                self._failures.pop(folder, None)
            return result, current is not None
        self._failures.pop(folder, None)
        capsule = loaded
        result = LoadResult(folder, capsule.name, True, None, capsule.source_id, capsule.load_seconds, capsule.from_cache)
        self._results[folder] = result
        self._fingerprints[folder] = mark
        if current is not None and current[0].source_id == capsule.source_id and current[0].manifest == capsule.manifest:
            return result, False
        self._install(capsule, replacing=current[0] if current is not None else None)
        log.info(
            "loaded capsule %s (%s) in %.1f ms%s",
            capsule.name,
            capsule.source_id,
            capsule.load_seconds * 1000,
            " from the compile cache" if capsule.from_cache else " (compiled)",
        )
        return result, True

    def _install(self, capsule: LoadedCapsule, replacing: LoadedCapsule | None = None) -> None:
        """Bind a capsule's handlers; a rebuilt one takes its old build's place in one step."""
        manifest = capsule.manifest
        participant = CapsuleParticipant(
            source_id=capsule.source_id,
            name=capsule.name,
            publish_acl=tuple(manifest.publish),
            subscribe_acl=tuple(manifest.subscribe),
        )
        bindings = [
            Binding(
                participant,
                pattern,
                self._capsule_handler(capsule, participant, handler),
                accepts=accepts_for(capsule, pattern),
                is_capsule=True,
            )
            for pattern, handler in manifest.handlers().items()
        ]
        self.bus.bind_all(bindings, replacing=replacing.source_id if replacing is not None else None)
        self.capsules[capsule.folder] = (capsule, participant)
        if replacing is not None:
            self.sandboxes.drop_capsule(replacing.source_id)
            log.info("replaced capsule %s (%s)", replacing.name, replacing.source_id)

    def _capsule_handler(self, capsule: LoadedCapsule, participant: Participant, handler: str):
        def run(message: Message) -> None:
            outcome = self.sandboxes.invoke(capsule, participant, message, handler)
            if outcome.ok:
                log.debug("%s.%s -> %s (%.2f ms)", capsule.name, handler, outcome.action, outcome.seconds * 1000)

        return run

    def _unload(self, folder: Path) -> None:
        capsule, _ = self.capsules.pop(folder)
        self._fingerprints.pop(folder, None)
        self._results.pop(folder, None)
        self.bus.unbind_owner(capsule.source_id)
        self.sandboxes.drop_capsule(capsule.source_id)
        log.info("unloaded capsule %s (%s)", capsule.name, capsule.source_id)

    def loaded(self) -> list[LoadedCapsule]:
        with self._lock:
            return sorted((c for c, _ in self.capsules.values()), key=lambda c: c.name)

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

    def announce(self) -> None:
        """Publish the capsule inventory to every watched principal."""
        with self._lock:
            principals = sorted(self.principals, key=str)
        for principal in principals:
            try:
                self.bus.publish(self.participant, CAPSULES_LOADED_TOPIC, self.inventory(principal).to_json(), principal)
            except BusError as exc:
                log.error("cannot announce the capsule set to %s: %s", principal, exc)

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


def _fingerprint(folder: Path, wasm_path: Path | None) -> tuple:
    """What a rebuild, an edit or a chmod changes: size, times and inode of the manifest and the component."""
    marks = []
    for path in (folder / MANIFEST_NAME, wasm_path):
        try:
            stat = path.stat() if path is not None else None
        except OSError:
            stat = None
        marks.append(stat and (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino))
    return tuple(marks)


def _component_path(folder: Path) -> Path | None:
    """The component the folder's manifest names, if the manifest reads."""
    try:
        return folder / load_manifest(folder).component_file
    except ManifestError:
        return None

