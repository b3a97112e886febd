"""Dev capsules (`astrid capsule dev`): the runner component, serving one folder's sources.

    capsule = load_dev_capsule(folder, cache, sources)   # a LoadedCapsule whose component is the runner

A dev capsule is loaded like a built one (same sandboxes, limits, grants
and principal rules: it is a `LoadedCapsule`), except that its component is
the dev runner, built once for every capsule, and that the runner imports the
capsule's modules from `sources` (`capsule/sources.py`: read and checked by
the host when this version was accepted) through `astrid:dev/sources`.

Its source-id is `source_id_for(name, sha256(runner + sources))`: new for
every edit of a source file or the manifest, so the broker lists again and
clients hear `list_changed` when the resources changed. Its provenance is
local: a dev capsule is the operator's own folder, never a signed release.

`DevSourcesAbi` links `astrid:dev/sources@1.0.0` into every sandbox's
linker; a sandbox gets files only when its capsule is a dev capsule (any
other gets none, and the loader refuses a built component that imports the
interface at all). Like every host import it never raises into the guest.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import wasmtime

from astrid.host.capsule.provenance import LOCAL, source_id_for
from astrid.host.capsule.sources import DEV_SOURCES_IMPORT, DevSources
from astrid.host.errors import CapsuleLoadError
from astrid.host.kernel.compile_cache import CompileCache, last_line
from astrid.host.kernel.loader import LoadedCapsule, check_interface

if TYPE_CHECKING:
    from astrid.host.kernel.sandbox import Instance

log = logging.getLogger(__name__)


def dev_source_id(name: str, runner_sha256: str, sources: DevSources) -> str:
    """The source-id of one version of a dev capsule: its name, the runner and the sources."""
    combined = hashlib.sha256(f"astrid-dev\0{runner_sha256}\0{sources.digest}".encode()).hexdigest()
    return source_id_for(name, combined)


def load_dev_capsule(folder: Path, cache: CompileCache, sources: DevSources) -> LoadedCapsule:
    """The dev capsule of `folder`: the runner (compiled, or from the cache) serving `sources`."""
    folder = Path(folder).resolve()
    manifest = sources.manifest
    try:
        loaded = cache.load(sources.runner)
    except (wasmtime.WasmtimeError, OSError) as exc:
        raise CapsuleLoadError(
            f"{manifest.name}: the dev runner {sources.runner} does not load: {last_line(exc)}"
        ) from None
    check_interface(manifest.name, loaded.component, cache.wasm_engine.engine, also=frozenset({DEV_SOURCES_IMPORT}))
    return LoadedCapsule(
        name=manifest.name,
        folder=folder,
        manifest=manifest,
        wasm_path=sources.runner,
        wasm_sha256=loaded.wasm_sha256,
        source_id=dev_source_id(manifest.name, loaded.wasm_sha256, sources),
        component=loaded.component,
        load_seconds=loaded.seconds,
        from_cache=loaded.from_cache,
        provenance=LOCAL,
        dev=sources,
    )


class DevSourcesAbi:
    """The host side of `astrid:dev/sources`: the calling sandbox's dev sources, or nothing."""

    def __init__(self, instance_of: Callable[[Any], Instance | None]) -> None:
        self._instance_of = instance_of

    def link(self, root: Any) -> None:
        with root.add_instance(DEV_SOURCES_IMPORT) as sources:
            sources.add_func("files", self._files)
            sources.add_func("read", self._read)

    def _sources(self, store: Any) -> DevSources | None:
        instance = self._instance_of(store)
        return instance.capsule.dev if instance is not None else None

    def _files(self, store: Any) -> list[str]:
        try:
            sources = self._sources(store)
            return sources.names() if sources is not None else []
        except Exception:  # never raise into the guest: it sees no files
            log.debug("host import astrid:dev/sources files failed", exc_info=True)
            return []

    def _read(self, store: Any, path: str) -> str | None:
        try:
            sources = self._sources(store)
            return sources.files.get(path) if sources is not None and isinstance(path, str) else None
        except Exception:  # never raise into the guest: no such file
            log.debug("host import astrid:dev/sources read failed", exc_info=True)
            return None
