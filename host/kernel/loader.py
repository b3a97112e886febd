"""Finding and loading capsules: manifest + component, checked before use."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import wasmtime
from wasmtime.component import Component, ComponentInstanceType, FuncType

from astrid.host.capabilities.registry import capabilities
from astrid.host.capsule.manifest import Manifest, ManifestError, load_manifest
from astrid.host.capsule.provenance import LOCAL, Provenance, Vet, source_id_for
from astrid.host.capsule.sources import DevSources
from astrid.host.errors import AstridError, CapsuleLoadError
from astrid.host.kernel.compile_cache import CompileCache, last_line
from astrid.host.kernel.wasi import wasi_import_problem

log = logging.getLogger(__name__)

# the host ABI; besides it, each registered capability's interface (`host_imports`)
HOST_IMPORTS = frozenset({"astrid:ipc/host@1.0.0", "astrid:sys/host@1.0.0", "astrid:guest/lifecycle@1.0.0"})
TYPE_ONLY_IMPORTS = frozenset({"astrid:guest/lifecycle@1.0.0", "capsule-result"})
HOOK_EXPORT = "astrid-hook-trigger"


def host_imports() -> frozenset[str]:
    """What a capsule may import: the host ABI and every capability's interface (linked into every
    capsule, served only when asked and granted)."""
    return HOST_IMPORTS | {capability.interface for capability in capabilities()}


@dataclass(frozen=True)
class LoadedCapsule:
    name: str
    folder: Path
    manifest: Manifest
    wasm_path: Path
    wasm_sha256: str
    source_id: str
    component: Component
    load_seconds: float
    from_cache: bool
    provenance: Provenance = LOCAL
    dev: DevSources | None = None  # dev mode: the runner serving these sources (`dev.py`)

    @property
    def grant_identity(self) -> str:
        """Whom the operator's grants must name for this capsule to get them."""
        return self.provenance.grant_key(self.name, self.folder)


def load_capsule(
    folder: Path, cache: CompileCache, vet: Vet | None = None, *, component: Path | None = None
) -> LoadedCapsule:
    """Check, compile (or take from the cache) and describe the capsule in `folder`. `vet` says who it is,
    before anything of it is compiled; without one every capsule is local and unsigned. `component`: load
    that file instead of the manifest's `[[component]]` one (a build's output before it is put in place)."""
    folder = Path(folder).resolve()
    try:
        manifest = load_manifest(folder)
    except ManifestError as exc:
        raise CapsuleLoadError(str(exc)) from None
    try:
        provenance = vet(folder) if vet is not None else LOCAL
    except AstridError as exc:
        raise CapsuleLoadError(f"{manifest.name}: not loaded: {exc}") from None
    wasm_path = folder / manifest.component_file if component is None else Path(component).resolve()
    if not wasm_path.is_file():
        raise CapsuleLoadError(
            f"{manifest.name}: component {wasm_path} not found (build it with `astrid capsule build {folder}`, "
            f"or serve its sources without a build: `astrid capsule dev {folder}`)"
        )
    _check_header(manifest.name, folder, wasm_path)
    try:
        loaded = cache.load(wasm_path)
    except (wasmtime.WasmtimeError, OSError) as exc:
        problem = last_line(exc)
        raise CapsuleLoadError(f"{manifest.name}: {wasm_path.name} is not a valid component: {problem}") from None
    if provenance.component_sha256 is not None and provenance.component_sha256 != loaded.wasm_sha256:
        raise CapsuleLoadError(
            f"{manifest.name}: {wasm_path.name} changed while it was being checked and loaded: load it again"
        )
    check_interface(manifest.name, loaded.component, cache.wasm_engine.engine)
    return LoadedCapsule(
        name=manifest.name,
        folder=folder,
        manifest=manifest,
        wasm_path=wasm_path,
        wasm_sha256=loaded.wasm_sha256,
        source_id=source_id_for(manifest.name, loaded.wasm_sha256),
        component=loaded.component,
        load_seconds=loaded.seconds,
        from_cache=loaded.from_cache,
        provenance=provenance,
    )


WASM_MAGIC = b"\0asm"
CORE_MODULE_VERSION = b"\x01\x00\x00\x00"


def _check_header(name: str, folder: Path, wasm_path: Path) -> None:
    """Name the two common mistakes before wasmtime does (it would read other bytes as WAT text)."""
    try:
        with wasm_path.open("rb") as source:
            header = source.read(8)
    except OSError as exc:
        raise CapsuleLoadError(f"{name}: cannot read {wasm_path}: {exc.strerror or exc}") from None
    rebuild = f"rebuild it with `astrid capsule build {folder}`"
    if header[:4] != WASM_MAGIC:
        raise CapsuleLoadError(f"{name}: {wasm_path.name} is not a WebAssembly file; {rebuild}")
    if header[4:8] == CORE_MODULE_VERSION:
        raise CapsuleLoadError(f"{name}: {wasm_path.name} is a core wasm module, not a component; {rebuild}")


def check_interface(
    name: str, component: Component, engine: wasmtime.Engine, *, also: frozenset[str] = frozenset()
) -> None:
    """Only the host ABI, the capabilities and the WASI the host serves (`wasi.py`) may be imported (and
    `also`: the dev runner's sources), and the interceptor must be exported."""
    component_type = component.type
    imports = component_type.imports(engine)
    allowed = host_imports() | TYPE_ONLY_IMPORTS | also
    foreign = sorted(set(imports) - allowed - {i for i in imports if i.startswith("wasi:")})
    foreign += [
        problem for i in sorted(imports) if i.startswith("wasi:") and (problem := _wasi_problem(i, imports[i], engine))
    ]
    if foreign:
        raise CapsuleLoadError(f"{name}: imports {', '.join(foreign)}, which the host does not provide")
    if HOOK_EXPORT not in set(component_type.exports(engine)):
        raise CapsuleLoadError(f"{name}: does not export {HOOK_EXPORT} (build it against the resource-capsule world)")


def _wasi_problem(name: str, item: Any, engine: wasmtime.Engine) -> str | None:
    """Why a WASI instance import cannot be served (`wasi.wasi_import_problem`), or None."""
    instance = item.ty
    if not isinstance(instance, ComponentInstanceType):
        return f"{name} (not an instance)"
    functions = [export for export, extern in instance.exports(engine).items() if isinstance(extern.ty, FuncType)]
    return wasi_import_problem(name, functions)
